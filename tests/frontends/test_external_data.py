"""External data: an initializer's `location` must resolve inside the model's folder.

The readers never read external data, but they check where it points, so that neither the build nor
`loam split` (which does read it) is pointed at a file elsewhere: `..`, an absolute path and a symlink
whose real path leaves the folder are refused naming the tensor, in `.onnx` and `.onnxtext` alike.
An initializer naming a data file of its own while a checkpoint also supplies the tensor is refused
too (`check_external_data_sources`): the two would disagree on where the tensor's bytes are.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.core.errors import ModelError
from loam.frontends.onnx_proto import check_external_data_sources, external_data_path, read_model
from loam.tools import loam_main

symlinks = pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="needs POSIX symlinks")


def model_with_external(location: str) -> onnx.ModelProto:
    """y = x + w, with w: float[4] stored as external data at `location`."""
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    w.external_data.add(key="location", value=location)
    w.external_data.add(key="offset", value="0")
    w.external_data.add(key="length", value="16")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=[w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def text_with_external(location: str) -> str:
    location = location.replace("\\", "\\\\")  # a string literal: a backslash is escaped
    return (
        '<ir_version: 8, opset_import: ["" : 17]>\n'
        f'g (float[4] x) => (float[4] y) <float[4] w = ["location": "{location}", "offset": "0", "length": "16"]>\n'
        "{ y = Add (x, w) }\n"
    )


def write_model(folder: Path, location: str, suffix: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"m{suffix}"
    if suffix == ".onnx":
        onnx.save(model_with_external(location), str(path))
    else:
        path.write_text(text_with_external(location), encoding="utf-8")
    return path


@pytest.fixture(params=[".onnx", ".onnxtext"])
def suffix(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@symlinks
def test_symlink_leaving_the_folder_is_refused(tmp_path: Path, suffix: str) -> None:
    outside = tmp_path / "secret.bin"
    outside.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.bin").symlink_to(outside)
    path = write_model(folder, "weights.bin", suffix)
    with pytest.raises(ModelError, match=r"initializer 'w': external data location 'weights.bin' resolves to .*secret"):
        read_model(path)


@symlinks
def test_symlinked_folder_leaving_the_model_folder_is_refused(tmp_path: Path, suffix: str) -> None:
    (tmp_path / "elsewhere").mkdir()
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "data").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    path = write_model(folder, "data/w.bin", suffix)
    with pytest.raises(ModelError, match=r"initializer 'w': external data location 'data/w.bin' resolves to"):
        read_model(path)


@symlinks
def test_symlink_staying_inside_the_folder_is_accepted(tmp_path: Path, suffix: str) -> None:
    folder = tmp_path / "model"
    (folder / "blobs").mkdir(parents=True)
    (folder / "blobs" / "real.bin").write_bytes(bytes(16))
    (folder / "weights.bin").symlink_to(folder / "blobs" / "real.bin")
    module = read_model(write_model(folder, "weights.bin", suffix))
    assert 'location = "weights.bin"' in str(module)


@pytest.mark.parametrize("location", ["../w.bin", "sub/../../w.bin", "/etc/passwd", "..\\w.bin", "C:\\w.bin", ""])
def test_traversal_and_absolute_locations_are_refused(tmp_path: Path, suffix: str, location: str) -> None:
    path = write_model(tmp_path / "model", location, suffix)
    with pytest.raises(ModelError, match=r"initializer 'w': external data location"):
        read_model(path)


def test_external_data_path_resolves_inside(tmp_path: Path) -> None:
    assert external_data_path(tmp_path, "sub/w.bin") == ((tmp_path / "sub" / "w.bin").resolve(), None)
    assert external_data_path(None, "w.bin") == (None, None)
    path, why = external_data_path(tmp_path, "a/../../w.bin")
    assert path is None and why is not None and "outside the model's folder" in why


def test_traversal_location_reaches_the_cli_as_one_line(
    tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_model(tmp_path / "model", "../../etc/passwd", suffix)
    with pytest.raises(SystemExit) as info:
        loam_main.main(["build", str(path), "-o", str(tmp_path / "out.py"), "--no-cache"])
    err = capsys.readouterr().err
    assert info.value.code == 1
    errors = [line for line in err.splitlines() if "error:" in line]
    assert errors == [err.splitlines()[-1]], err
    assert "initializer 'w': external data location '../../etc/passwd' is outside the model's folder" in errors[0]
    assert "Traceback" not in err


# -- an initializer's own data file against a checkpoint ---------------------------------------


def test_own_data_file_and_a_checkpoint_supplying_the_tensor_is_refused(tmp_path: Path, suffix: str) -> None:
    path = write_model(tmp_path, "w.bin", suffix)
    ir = read_model(path)
    checkpoint = tmp_path / "weights.safetensors"
    with pytest.raises(ModelError, match=r"initializer 'w' names its own data file 'w.bin', but checkpoint .*weights"):
        check_external_data_sources(ir, path, {"w": checkpoint})
    with pytest.raises(ModelError, match=r"^initializer 'w' names its own data file"):
        check_external_data_sources(ir, None, {"w": checkpoint})  # an in-memory model
    check_external_data_sources(ir, path, {"other": checkpoint})  # w not supplied: its own file is its source


def test_own_data_file_with_a_checkpoint_reaches_the_cli_as_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.numpy import save_file

    path = write_model(tmp_path, "w.bin", ".onnx")
    (tmp_path / "w.bin").write_bytes(bytes(16))
    save_file({"w": np.ones(4, dtype=np.float32)}, str(tmp_path / "w.safetensors"))
    argv = ["build", str(path), "--checkpoint", str(tmp_path / "w.safetensors"), "-o", str(tmp_path / "o.py")]
    with pytest.raises(SystemExit) as info:
        loam_main.main([*argv, "--layout", "*=N", "--no-cache"])
    err = capsys.readouterr().err
    assert info.value.code == 1 and "Traceback" not in err
    assert err.splitlines()[-1].startswith("loam: error: ")
    assert "initializer 'w' names its own data file 'w.bin', but checkpoint" in err.splitlines()[-1]


def test_location_inside_a_safetensors_checkpoint_is_accepted(tmp_path: Path) -> None:
    # What `loam split` and the shipped examples write: the location is a checkpoint; the ones the
    # invocation names supply the tensor, a sharded copy of the same weights included.
    path = write_model(tmp_path, "weights.safetensors", ".onnxtext")
    ir = read_model(path)
    check_external_data_sources(ir, path, {"w": tmp_path / "weights.safetensors"})
    check_external_data_sources(ir, path, {"w": tmp_path / "model-00001-of-00002.safetensors"})
    check_external_data_sources(ir, None, {"w": Path("elsewhere/weights.safetensors")})


def test_examples_point_at_their_own_checkpoint() -> None:
    # The shipped split examples stay buildable under the rule: every initializer names the checkpoint.
    from loam.dialects.graph import InitializerOp

    root = Path(__file__).resolve().parents[2] / "examples"
    for name in ("mlp", "digits"):
        model = root / name / f"{name}.onnxtext"
        ir = read_model(model)
        names = [op.onnx_name.data for op in ir.walk() if isinstance(op, InitializerOp)]
        assert names
        check_external_data_sources(ir, model, dict.fromkeys(names, root / name / f"{name}.safetensors"))
