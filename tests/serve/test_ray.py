"""`loam serve --ray`: the same server as a Ray Serve deployment, scaled by replicas, on a Ray instance on this machine.

The command runs as an operator runs it: a real process that deploys and serves until Ctrl-C (SIGINT) or SIGTERM,
with Ray's HTTP proxy on 127.0.0.1; requests go through that proxy with the `openai` client and httpx.  The main
tests join it to a Ray instance this module starts (as `ray start` machines are joined, `--ray-address`); the first
lets the command start and stop a Ray instance of its own.  The oracle is one plain `loam serve` server of the same
package (in this process, on 127.0.0.1).  The package is the tiny GPT-2 with two rows per model, so a replica takes
four requests at a time (`max_ongoing_requests`) and a stream may wait on the replica behind two others: a replica
killed under load has requests of its own in flight.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import pytest
import ray
from ray import serve

from loam.serve.cli import Listener
from loam.serve.server import Server
from loam.tools.loam_main import main
from tests.serve.serving import PACKAGES, package_copy

pytestmark = pytest.mark.xdist_group("ray")
LOAM = [sys.executable, "-m", "loam.tools.loam_main"]
MODEL = "tiny-gpt2"
PROMPTS = [f"Beautiful is better than ugly {i}." for i in range(16)]
LONG = {"max_tokens": 100, "temperature": 0, "ignore_eos": True}  # 100 greedy tokens, whatever they are


@dataclass
class Deployment:
    """A running `loam serve --ray` command: where its proxy listens, its process and its stderr."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, signum: int) -> int:
        """Stop the command as an operator or a process manager does; its exit status."""
        self.process.send_signal(signum)
        try:
            return self.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)  # its own session: the command and what it started
            self.process.wait(10)
            raise


def start_command(package: Path, cache: Path, log: Path, *flags: str) -> Deployment:
    """`loam serve PACKAGE --ray --port 0 FLAGS...`, once it says where it listens (the replicas are serving)."""
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*LOAM, "serve", str(package), "--ray", "--port", "0", *flags],
            stdout=subprocess.DEVNULL, stderr=sink, env={**os.environ, "LOAM_CACHE_DIR": str(cache)},
            start_new_session=True,
        )  # fmt: skip
    deployment = Deployment("", process, log)
    deadline = time.monotonic() + 120
    while not deployment.url and process.poll() is None and time.monotonic() < deadline:
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", deployment.text())
        deployment.url = found.group(1) if found else ""
        time.sleep(0.2)
    if not deployment.url:
        deployment.stop(signal.SIGTERM)
    assert deployment.url, deployment.text()
    return deployment


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return package_copy(tmp_path_factory, "tiny_gpt2", capacities={"resident_requests": 2})


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ray-cache")


@pytest.fixture(scope="module")
def single(package: Path, cache: Path) -> Iterator[str]:
    """One plain `loam serve` server of the package (its build fills the cache the replicas then read)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOAM_CACHE_DIR", str(cache))
        server = Server()
        try:
            server.register(package)
            with Listener(server) as listener:
                yield listener.url
        finally:
            server.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A Ray instance on this machine, two CPUs and no dashboard, standing for a cluster; its address."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def deployed(
    package: Path, cache: Path, single: str, cluster: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """`loam serve PACKAGE --ray --replicas 2 --ray-address CLUSTER --port 0`, stopped with SIGINT (Ctrl-C)."""
    deployment = start_command(package, cache, tmp_path_factory.mktemp("ray") / "serve.log",
                               "--replicas", "2", "--ray-address", cluster)  # fmt: skip
    try:
        yield deployment
    finally:
        status = deployment.stop(signal.SIGINT)
    assert status == 0, deployment.text()
    assert "loam serve: stopped" in deployment.text() and "Traceback" not in deployment.text()
    # The command took its deployment away with it and left the cluster (and Serve on it) running.
    assert "loam" not in serve.status().applications


def test_without_an_address_the_command_runs_a_ray_instance_of_its_own_and_stops_it(
    package: Path, cache: Path, single: str, tmp_path: Path
) -> None:
    deployment = start_command(package, cache, tmp_path / "serve.log")
    try:
        text, _, replica = completion(deployment.url, PROMPTS[0], max_tokens=12, temperature=0)
        assert text == completion(single, PROMPTS[0], max_tokens=12, temperature=0)[0]
        session = re.search(r"/tmp/ray/(session_[^/]+)/logs", deployment.text())
        assert session, deployment.text()
    finally:
        status = deployment.stop(signal.SIGTERM)  # what a process manager sends
    assert status == 0 and "loam serve: stopped" in deployment.text(), deployment.text()
    # Nothing of its Ray instance is left running: not the replica, not a process naming the session.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(replica):
        time.sleep(0.2)
    assert not _alive(replica)
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and session.group(1) in _cmdline(pid)]
    assert not left, [_cmdline(pid) for pid in left]


def _alive(pid: str) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:  # gone meanwhile
        return ""


def completion(url: str, prompt: str, **params: object) -> tuple[str, str, str]:
    """One non-streamed completion through the `openai` client: its text, and the replica and pid that answered."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
    extra = {"ignore_eos": params.pop("ignore_eos")} if "ignore_eos" in params else None  # Loam's own field
    raw = client.completions.with_raw_response.create(model=MODEL, prompt=prompt, extra_body=extra, **params)  # type: ignore[call-overload]
    answer = raw.parse()
    return answer.choices[0].text, raw.headers.get("x-loam-replica", ""), raw.headers.get("x-loam-pid", "")


def chat_stream(url: str, content: str) -> tuple[str, str]:
    """A streamed chat completion through the `openai` client: the concatenated deltas and the pid that answered."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
    messages = [{"role": "user", "content": content}]
    with client.chat.completions.with_streaming_response.create(
        model=MODEL,
        messages=messages,
        max_tokens=12,
        temperature=0,
        stream=True,  # type: ignore[arg-type]
    ) as raw:
        text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
        return text, raw.headers.get("x-loam-pid", "")


def test_requests_reach_both_replicas_and_answer_as_one_server_does(deployed: Deployment, single: str) -> None:
    url = deployed.url
    health = httpx.get(f"{url}/health", timeout=30)
    assert health.status_code == 200 and health.json()["models"] == [MODEL]
    with ThreadPoolExecutor(16) as pool:
        through_ray = list(pool.map(lambda p: completion(url, p, max_tokens=12, temperature=0), PROMPTS))
        streamed = list(pool.map(lambda p: chat_stream(url, p), PROMPTS[:4]))
    expected = [completion(single, p, max_tokens=12, temperature=0)[0] for p in PROMPTS]
    expected_chat = [chat_stream(single, p)[0] for p in PROMPTS[:4]]
    assert [text for text, _, _ in through_ray] == expected
    assert [text for text, _ in streamed] == expected_chat
    assert all(expected) and len(set(expected)) > 1  # real, distinct answers (not all empty, not one text)
    replicas = {(replica, pid) for _, replica, pid in through_ray}
    assert len({replica for replica, _ in replicas}) == 2 and len({pid for _, pid in replicas}) == 2, replicas
    assert {pid for _, pid in streamed} <= {pid for _, pid in replicas}
    assert str(os.getpid()) not in {pid for _, pid in replicas}  # the replicas are processes of their own


@dataclass
class Stream:
    """One streamed completion through Ray's proxy, as a client saw it."""

    prompt: str
    pid: str = ""
    opened: threading.Event = field(default_factory=threading.Event)  # the response's headers arrived
    text: str = ""
    outcome: str = ""  # "done" ([DONE] after every chunk), or what failed
    ended: float = 0.0

    def run(self, url: str) -> None:
        body = {"model": MODEL, "prompt": self.prompt, "stream": True, **LONG}
        try:
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as response:
                self.pid = response.headers.get("x-loam-pid", "")
                self.opened.set()
                if response.status_code != 200:
                    self.outcome = f"HTTP {response.status_code}"
                    return
                for line in response.iter_lines():
                    if line == "data: [DONE]":
                        self.outcome = "done"
                    elif line.startswith("data: "):
                        event = json.loads(line.removeprefix("data: "))
                        if "error" in event:
                            self.outcome = f"error event: {event['error']['message']}"
                            return
                        self.text += event["choices"][0]["text"]
                if self.outcome != "done":
                    self.outcome = "the stream ended without [DONE]"
        except httpx.HTTPError as err:
            self.outcome = f"{type(err).__name__}: {err}"
        finally:
            self.opened.set()
            self.ended = time.monotonic()


def test_killing_a_replica_fails_only_its_in_flight_requests(deployed: Deployment, single: str) -> None:
    url = deployed.url
    prompts = [f"Now is better than never {i}." for i in range(24)]
    with ThreadPoolExecutor(8) as pool:
        expected = dict(zip(prompts, pool.map(lambda p: completion(single, p, **LONG)[0], prompts), strict=True))
    streams = [Stream(p) for p in prompts]
    threads = [threading.Thread(target=s.run, args=(url,), daemon=True) for s in streams]
    for thread in threads:
        thread.start()
    # Kill a replica once three of its streams are open and unfinished: at most two of them are being generated
    # (two rows), so at least one is waiting on the replica, and cannot have finished before the kill.
    victim, doomed = "", []
    deadline = time.monotonic() + 60
    while not victim and time.monotonic() < deadline:
        open_ = Counter(s.pid for s in streams if s.opened.is_set() and s.pid and not s.outcome)
        if open_ and open_.most_common(1)[0][1] >= 3:
            victim = open_.most_common(1)[0][0]
            doomed = [s for s in streams if s.pid == victim and s.opened.is_set() and not s.outcome]
            os.kill(int(victim), signal.SIGKILL)
            killed = time.monotonic()
        time.sleep(0.002)
    assert victim, [(s.pid, s.outcome) for s in streams]
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a stream hung after the kill"

    # Only what the killed replica held failed: its open streams (at least the one waiting behind its two rows)
    # and any request Ray's proxy had handed it whose headers had not come back yet (the proxy's own 500, no
    # replica header), never more than the four a replica takes at once.  Each failed at once, not at a timeout.
    # Every other request, the other replica's and those Ray held back, answered in full as one server does.
    failed = [s for s in streams if s.outcome != "done"]
    shown = [(s.pid, s.outcome, round(s.ended - killed, 2)) for s in failed]
    assert 1 <= len(failed) <= 4 and any(s in doomed for s in failed), shown
    assert all(s.pid == victim or (not s.pid and s.outcome.startswith("HTTP 5")) for s in failed), shown
    assert all(s.ended - killed < 10 for s in failed), shown
    answered = [s for s in streams if s not in failed]
    assert [s.text for s in answered] == [expected[s.prompt] for s in answered]
    survivors = {s.pid for s in answered} - {victim}
    assert len(survivors) == 1, survivors

    # The next requests succeed, and Ray replaces the replica: a new process answers, with the same answers.
    with ThreadPoolExecutor(8) as pool:
        after = list(pool.map(lambda p: completion(url, p, max_tokens=12, temperature=0), PROMPTS[:8]))
    short = [completion(single, p, max_tokens=12, temperature=0)[0] for p in PROMPTS[:8]]
    assert [text for text, _, _ in after] == short
    replacement = None
    deadline = time.monotonic() + 90
    while replacement is None and time.monotonic() < deadline:
        text, _, pid = completion(url, PROMPTS[0], max_tokens=12, temperature=0)
        assert text == after[0][0]
        replacement = pid if pid not in survivors | {victim} else None
        time.sleep(0.1)
    assert replacement is not None, "Ray did not bring a replacement replica up within 90 s"

    # The command said so as it happened, one line each: a replica short, then both running again.
    deadline, states = time.monotonic() + 15, []
    while time.monotonic() < deadline and (not states or states[-1] != "HEALTHY, replicas 2 RUNNING"):
        time.sleep(0.2)
        states = re.findall(r"loam serve: deployment (.+)", deployed.text())
    assert states[0] == states[-1] == "HEALTHY, replicas 2 RUNNING", states
    assert any("2 RUNNING" not in state for state in states[1:-1]), states


@pytest.mark.parametrize(
    ("arguments", "status", "message"),
    [
        (["--replicas", "2"], 2, "--replicas needs --ray"),
        (["--ray-address", "auto"], 2, "--ray-address needs --ray"),
        (["--ray", "--replicas", "0"], 2, "--replicas 0: give 1 or more"),
        (["--ray", "--replica-cpus", "0"], 2, "--replica-cpus 0.0: give a number above 0"),
        (["--ray", "--port", "70000"], 2, "--port 70000: give a port from 0 to 65535"),
        (["--ray", "--package-root", "/tmp"], 2, "--package-root cannot be used with --ray"),
    ],
)
def test_bad_flags_are_refused_in_one_line_naming_the_flag(
    arguments: list[str], status: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", str(PACKAGES / "tiny_gpt2"), *arguments])
    err = capsys.readouterr().err
    assert exit_.value.code == status and err.startswith("loam: error: ") and message in err, err
    assert "Traceback" not in err and "starting a local Ray instance" not in err  # refused before Ray starts


def test_bad_packages_are_refused_before_ray_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for arguments, message in (
        ([str(tmp_path / "nowhere")], "not a package folder"),
        ([], "--ray needs at least one PACKAGE_DIR"),
        ([str(PACKAGES / "tiny_gpt2")] * 2, "both serve a model named 'tiny-gpt2'"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["serve", *arguments, "--ray", "--replicas", "2"])
        err = capsys.readouterr().err
        assert exit_.value.code in (1, 2) and err.startswith("loam: error: ") and message in err, err
        assert "starting a local Ray instance" not in err and "Traceback" not in err


def test_loam_serve_help_explains_the_ray_flags() -> None:
    done = subprocess.run([*LOAM, "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for flag in ("--ray ", "--replicas N", "--replica-cpus C", "--ray-address ADDR", "ray start --head"):
        assert flag in text, flag
