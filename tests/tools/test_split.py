"""`loam split MODEL.onnx -o DIR`: a textual graph whose float initializers carry no values, plus a
safetensors checkpoint holding them under the graph's names.

Checked against real behaviour: the text reads back with `onnx.parser`, the checkpoint reads back
with the `safetensors` library to the original arrays (halves stay halves), and `loam build` of the
split pair gives a module whose outputs equal onnxruntime's on the original model — for a small model
with float32, float16 and int64 initializers and for the tiny GPT-2 re-assembled into one `.onnx`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import load_external_data_for_model
from safetensors.numpy import load_file

from loam.core.errors import ModelError
from loam.driver.options import Options
from loam.driver.pipeline import build
from loam.testing import assert_same, import_module_file, run_onnxruntime
from loam.tools import loam_main
from loam.tools.split import split_model

ROOT = Path(__file__).resolve().parents[2]
GPT2 = ROOT / "tests" / "models" / "tiny_gpt2"
GENAI = ROOT / "tests" / "models" / "genai"


def small_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """y = Reshape(x @ w + Cast(b16), shape): float32, float16 and int64 initializers."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b16 = rng.standard_normal(4).astype(np.float16)
    shape = np.array([4, 2], dtype=np.int64)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Cast", ["b16"], ["b"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Add", ["h", "b"], ["s"], name="add"),
        helper.make_node("Reshape", ["s", "shape"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2])],
        initializer=[numpy_helper.from_array(a, n) for n, a in (("w", w), ("b16", b16), ("shape", shape))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"w": w, "b16": b16, "shape": shape}


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        loam_main.main(argv)
    code = info.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def test_split_writes_a_valueless_graph_and_the_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, arrays = small_model()
    onnx.save(model, str(tmp_path / "small.onnx"))
    code, err = run_cli(["split", str(tmp_path / "small.onnx"), "-o", str(tmp_path / "out")], capsys)
    assert code == 0, err
    assert "2 tensors in the checkpoint, 1 kept in the graph" in err

    text = (tmp_path / "out" / "small.onnxtext").read_text(encoding="utf-8")
    reread = onnx.parser.parse_model(text)
    inits = {t.name: t for t in reread.graph.initializer}
    for name in ("w", "b16"):
        assert inits[name].data_location == TensorProto.EXTERNAL
        assert not inits[name].raw_data and not inits[name].float_data
        assert dict((e.key, e.value) for e in inits[name].external_data)["location"] == "small.safetensors"
    assert inits["shape"].data_location != TensorProto.EXTERNAL
    np.testing.assert_array_equal(numpy_helper.to_array(inits["shape"]), arrays["shape"])

    # The checkpoint holds the float initializers under their graph names, halves as halves.
    stored = load_file(str(tmp_path / "out" / "small.safetensors"))
    assert set(stored) == {"w", "b16"}
    assert stored["b16"].dtype == np.float16
    np.testing.assert_array_equal(stored["w"], arrays["w"])
    np.testing.assert_array_equal(stored["b16"], arrays["b16"])

    # The external-data entries point at the same bytes: onnx reads the text's weights back.
    load_external_data_for_model(reread, str(tmp_path / "out"))
    for name in ("w", "b16"):
        np.testing.assert_array_equal(
            numpy_helper.to_array(reread.graph.initializer[list(inits).index(name)]), arrays[name]
        )


def test_loam_build_of_the_split_pair_matches_onnxruntime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, _ = small_model()
    onnx.save(model, str(tmp_path / "small.onnx"))
    out = tmp_path / "out"
    assert run_cli(["split", str(tmp_path / "small.onnx"), "-o", str(out)], capsys)[0] == 0
    text, checkpoint = out / "small.onnxtext", out / "small.safetensors"
    code, err = run_cli(["layout", str(text), "--checkpoint", str(checkpoint), "-o", str(tmp_path / "l.toml")], capsys)
    assert code == 0, err
    argv = ["build", str(text), "--options", str(tmp_path / "l.toml"), "--checkpoint", str(checkpoint)]
    code, err = run_cli([*argv, "-o", str(tmp_path / "small_mod.py")], capsys)
    assert code == 0, err

    module = import_module_file(tmp_path / "small_mod.py")
    weights = module.Weights.load(checkpoint.read_bytes())
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    got = module.forward(weights, x)
    assert_same([np.asarray(got[0] if isinstance(got, tuple) else got)], run_onnxruntime(model, {"x": x}))


def test_external_data_input_is_read_and_int_tensors_come_inline(tmp_path: Path) -> None:
    # A model saved the way every model over 2 GB is: all tensors in a side file.
    model, arrays = small_model()
    folder = tmp_path / "src"
    folder.mkdir()
    onnx.save(model, str(folder / "small.onnx"), save_as_external_data=True, location="small.data", size_threshold=0)
    assert (folder / "small.data").stat().st_size > 0
    result = split_model(folder / "small.onnx", tmp_path / "out")
    assert set(result.moved) == {"w", "b16"} and result.kept == ("shape",)
    reread = onnx.parser.parse_model(result.graph.read_text(encoding="utf-8"))
    shape = next(t for t in reread.graph.initializer if t.name == "shape")
    assert shape.data_location != TensorProto.EXTERNAL
    np.testing.assert_array_equal(numpy_helper.to_array(shape), arrays["shape"])
    np.testing.assert_array_equal(load_file(str(result.checkpoint))["w"], arrays["w"])


def test_tiny_gpt2_split_builds_and_matches_onnxruntime(tmp_path: Path) -> None:
    # Re-assemble the committed text graph and checkpoint into one .onnx carrying its weights.
    original = onnx.parser.parse_model((GPT2 / "decoder.onnxtext").read_text(encoding="utf-8"))
    load_external_data_for_model(original, str(GPT2))
    onnx.save(original, str(tmp_path / "decoder.onnx"))

    result = split_model(tmp_path / "decoder.onnx", tmp_path / "out")
    assert onnx.parser.parse_model(result.graph.read_text(encoding="utf-8")).graph.node
    options = Options.from_toml(GPT2 / "decoder.loam.toml").merged(checkpoints=[result.checkpoint])
    built = build(result.graph, options=options)
    weights = built.module.Weights.load(result.checkpoint.read_bytes())
    ids = np.array([[3, 14, 15, 92, 65]], dtype=np.int64)
    mask = np.ones_like(ids)
    got = built.module.forward(weights, ids, mask)
    want = run_onnxruntime(original, {"input_ids": ids, "attention_mask": mask})
    assert_same([np.asarray(g) for g in got], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["llama_int4", "qwen2_int4"])
def test_the_builders_int4_blocks_go_in_the_checkpoint_and_build(tmp_path: Path, name: str) -> None:
    """MatMulNBits' packed blocks (uint8) are weights, not graph: the split keeps them in the safetensors
    file as U8, the text holds no value of theirs, and the split pair computes onnxruntime's logits on
    the builder's own model (Qwen2's GatherBlockQuantized reads its tied head's blocks through them)."""
    from loam.driver.draft import draft_layout
    from loam.frontends.onnx_text import read_onnx_text

    folder = GENAI / name
    result = split_model(folder / "model.onnx", tmp_path / "out")
    original = onnx.load(str(folder / "model.onnx"))
    blocks = {t.name for t in original.graph.initializer if t.name.endswith("_Q4")}
    assert blocks and blocks <= set(result.moved)
    stored = load_file(str(result.checkpoint))
    assert all(stored[b].dtype == np.uint8 for b in blocks)
    reread = read_onnx_text(result.graph)  # Loam's reader: onnx.parser refuses the builder's '[1]' names
    assert all(t.data_location == TensorProto.EXTERNAL for t in reread.graph.initializer if t.name in blocks)
    assert result.graph.stat().st_size < 40_000  # the graph alone (it was 274 kB with the blocks as hex)

    options = Options(dims={"kv_cache_dim": 16}, checkpoints=(result.checkpoint,))
    built = build(result.graph, options=draft_layout(result.graph, options=options).options(options))
    weights = built.module.Weights.load_file(result.checkpoint)
    assert all(weights.stored(b).dtype == np.uint8 for b in blocks)
    empty = np.zeros((1, 2, 0, 16), np.float32)
    feeds = {
        "input_ids": np.array([[5, 17, 42, 7]], np.int64),
        "attention_mask": np.ones((1, 4), np.int64),
        **{f"past_key_values.{i}.{kv}": empty for i in range(2) for kv in ("key", "value")},
    }
    got = built.module.forward(weights, *[feeds[n] for n, *_ in built.module.INPUTS])
    want = run_onnxruntime(original, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


# -- refusals --------------------------------------------------------------------------------------


def test_output_folder_that_would_overwrite_the_input_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A text model carrying its values, split into its own folder, would be overwritten.
    model, _ = small_model()
    text = tmp_path / "small.onnxtext"
    text.write_text(onnx.printer.to_text(model), encoding="utf-8")
    before = text.read_bytes()
    code, err = run_cli(["split", str(text), "-o", str(tmp_path)], capsys)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("loam: error: ") and "would overwrite an input of the split" in lines[0]
    assert text.read_bytes() == before
    assert not (tmp_path / "small.safetensors").exists()


def test_checkpoint_that_would_overwrite_the_external_data_is_refused(tmp_path: Path) -> None:
    model, _ = small_model()
    onnx.save(
        model, str(tmp_path / "small.onnx"), save_as_external_data=True, location="small.safetensors", size_threshold=0
    )
    data = (tmp_path / "small.safetensors").read_bytes()
    with pytest.raises(ModelError, match=r"small\.safetensors' would overwrite an input of the split"):
        split_model(tmp_path / "small.onnx", tmp_path)
    assert (tmp_path / "small.safetensors").read_bytes() == data


def test_same_name_with_different_values_is_refused(tmp_path: Path) -> None:
    # Two branches of an If each hold an initializer 'c'; a checkpoint has one tensor per name.
    def branch(value: float, out: str) -> onnx.GraphProto:
        c = numpy_helper.from_array(np.full(2, value, dtype=np.float32), "c")
        return helper.make_graph(
            [helper.make_node("Identity", ["c"], [out])],
            f"b{out}",
            [],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2])],
            initializer=[c],
        )

    node = helper.make_node(
        "If", ["cond"], ["y"], name="if", then_branch=branch(1.0, "t"), else_branch=branch(2.0, "e")
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    with pytest.raises(
        ModelError, match=r"initializer 'c' is defined with different values in .*_branch.* and .*_branch"
    ):
        split_model(tmp_path / "m.onnx", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_reserved_metadata_name_is_refused(tmp_path: Path) -> None:
    model, _ = small_model()
    for init in model.graph.initializer:
        if init.name == "w":
            init.name = "__metadata__"
    for node in model.graph.node:
        node.input[:] = ["__metadata__" if i == "w" else i for i in node.input]
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(ModelError, match=r"initializer '__metadata__'.*reserved by safetensors"):
        split_model(tmp_path / "m.onnx", tmp_path / "out")


def test_external_data_outside_the_folder_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    model, _ = small_model()
    (tmp_path / "secret.bin").write_bytes(bytes(48))
    w = next(t for t in model.graph.initializer if t.name == "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="../secret.bin")
    (tmp_path / "m").mkdir()
    onnx.save(model, str(tmp_path / "m" / "small.onnx"))
    with pytest.raises(ModelError, match=r"initializer 'w': external data location '\.\./secret\.bin' is outside"):
        split_model(tmp_path / "m" / "small.onnx", tmp_path / "out")


def test_truncated_external_data_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    model, _ = small_model()
    onnx.save(model, str(tmp_path / "small.onnx"), save_as_external_data=True, location="d.bin", size_threshold=0)
    data = (tmp_path / "d.bin").read_bytes()
    (tmp_path / "d.bin").write_bytes(data[:10])
    with pytest.raises(ModelError, match=r"initializer '\w+': external data .*holds \d+ of the \d+ bytes"):
        split_model(tmp_path / "small.onnx", tmp_path / "out")
