"""examples/browser-chat in headless Chromium: a user asks SmolLM2 a question and reads the reply.

The example's build step writes the page (the Loam module of SmolLM2 with its packed weights, the
GGUF's tokenizer for Hugging Face's tokenizers.js, the chat template around one message); the test
serves it from 127.0.0.1, types the question into the page's form and clicks Send, as a user does.
The page's prompt ids are those of Loam's own tokenizer and chat template, and its first greedy
tokens are onnxruntime's (tests/models/smollm2/oracle.json, which the numpy module also decodes).
SwiftShader is slow: the reply is cut at 8 tokens.  The test saves its screenshot of the page;
`LOAM_CHAT_SCREENSHOT=docs/browser-chat.png` writes it where the README shows it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import ModuleType

import pytest

from loam.testing import import_module_file
from loam.text.tokenizer import Tokenizer
from loam.tools.browser_run import Browser
from tests.smollm2_file import smollm2_gguf

pytestmark = pytest.mark.xdist_group("browser")

ROOT = Path(__file__).resolve().parents[3]
ORACLE = json.loads((ROOT / "tests" / "models" / "smollm2" / "oracle.json").read_text(encoding="utf-8"))
TOKENS = 8


def example_build() -> ModuleType:
    return import_module_file(ROOT / "examples" / "browser-chat" / "build.py", "browser_chat_build")


def test_the_chat_page_answers_the_france_question_with_onnxruntimes_tokens(
    browser: Browser, served: Path, tmp_path: Path
) -> None:
    if not (ROOT / "node_modules" / "@huggingface" / "tokenizers").is_dir():
        (pytest.fail if os.environ.get("CI") else pytest.skip)("tokenizers.js is not installed (scripts/dev-setup.sh)")
    gguf = smollm2_gguf()
    example_build().build_page(served / "chat", gguf, progress=False)
    browser.open("chat/index.html")
    deadline = time.monotonic() + 300
    while browser.evaluate("return document.getElementById('status').textContent") != "ready: WebGPU":
        status = browser.evaluate("return document.getElementById('status').textContent")
        assert not str(status).startswith("could not start"), status
        assert time.monotonic() < deadline, f"the page did not get ready: {status}"
        time.sleep(0.5)
    question = "What is the capital of France?"
    browser.type_into("#max-tokens", str(TOKENS))
    browser.type_into("#question", question)
    browser.click("#send")
    done = browser.script(
        "const done = arguments[arguments.length - 1];"
        "const poll = () => window.loamChat.last ? done(window.loamChat.last) : setTimeout(poll, 200); poll();"
    )
    assert isinstance(done, dict) and "error" not in done, done
    tokenizer = Tokenizer.from_gguf(gguf)
    want_prompt = tokenizer.encode_chat([{"role": "user", "content": question}])
    oracle = next(p for p in ORACLE["prompts"] if p["name"] == "chat_france")
    assert done["prompt"] == want_prompt == oracle["prompt_ids"]
    assert done["ids"] == oracle["onnxruntime_ids"][:TOKENS]
    assert done["text"] == tokenizer.decode(done["ids"], skip_special_tokens=True) != ""
    shown = browser.evaluate("return document.querySelector('#log .bot').textContent")
    assert shown == done["text"]
    stats = str(browser.evaluate("return document.getElementById('stats').textContent"))
    assert stats.startswith(f"{TOKENS} tokens; prompt ") and "tokens/s" in stats
    png = browser.screenshot()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    (tmp_path / "browser-chat.png").write_bytes(png)
    if os.environ.get("LOAM_CHAT_SCREENSHOT"):
        Path(os.environ["LOAM_CHAT_SCREENSHOT"]).write_bytes(png)
