"""Options: the TOML form, its refusals (naming file, key and layout entry) and flag merging."""

from __future__ import annotations

from pathlib import Path

import pytest

from loam.core.errors import OptionsError
from loam.core.layout import LayoutRule
from loam.driver.options import Options

FULL = """\
architecture = "mlp"
inline_weights = true
outputs = ["y", "hidden"]
checkpoint = ["shard-1.safetensors", "/abs/shard-2.safetensors"]

[dims]
N = 4
S = 0

[[layout]]
pattern = "fc*.weight"
axes = ["Hidden", "In"]

[[layout]]
pattern = "x"
axes = ["Batch", "( C H  W )"]
graph = "main"
"""


def write(tmp_path: Path, text: str, name: str = "loam.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_from_toml_reads_every_key(tmp_path: Path) -> None:
    options = Options.from_toml(write(tmp_path, FULL))
    assert options.architecture == "mlp"
    assert options.inline_weights is True
    assert options.outputs == ("y", "hidden")
    assert dict(options.dims) == {"N": 4, "S": 0}
    assert options.layout == (
        LayoutRule("fc*.weight", ("Hidden", "In")),
        LayoutRule("x", ("Batch", "(C H W)"), graph="main"),
    )
    assert options.layout[1].axes[1] == "(C H W)"


def test_checkpoints_are_relative_to_the_toml_file(tmp_path: Path) -> None:
    sub = tmp_path / "conf"
    sub.mkdir()
    options = Options.from_toml(write(sub, FULL))
    assert options.checkpoints == (sub / "shard-1.safetensors", Path("/abs/shard-2.safetensors"))


def test_single_checkpoint_string(tmp_path: Path) -> None:
    options = Options.from_toml(write(tmp_path, 'checkpoint = "w.safetensors"\n'))
    assert options.checkpoints == (tmp_path / "w.safetensors",)


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    assert Options.from_toml(write(tmp_path, "")) == Options()
    defaults = Options()
    assert (defaults.architecture, defaults.inline_weights, defaults.outputs) == (None, False, None)
    assert (dict(defaults.dims), defaults.layout, defaults.checkpoints) == ({}, (), ())


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("archtecture = 'x'\n", "unknown key 'archtecture'"),
        ("inline_weights = 1\n", "key 'inline_weights' must be true or false, got an integer"),
        ("int8_activations = 'yes'\n", "key 'int8_activations' must be true or false, got a string"),
        ("architecture = 3\n", "key 'architecture' must be a string, got an integer"),
        ("outputs = 'y'\n", "key 'outputs' must be an array of strings, got a string"),
        ("outputs = ['y', 2]\n", "key 'outputs' must be an array of strings, got an integer"),
        ("outputs = []\n", "key 'outputs' is empty"),
        ("checkpoint = 5\n", "key 'checkpoint' must be a path string"),
        ("dims = 4\n", "key 'dims' must be a table"),
        ("[dims]\nN = -1\n", "key 'dims.N' must be a non-negative integer"),
        ("[dims]\nN = true\n", "key 'dims.N' must be a non-negative integer, got a boolean"),
        ("[dims]\nN = 2.5\n", "key 'dims.N' must be a non-negative integer, got a float"),
        ("layout = 'x=A'\n", "key 'layout' must be an array of tables"),
    ],
)
def test_bad_top_level_keys_name_file_and_key(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(OptionsError) as info:
        Options.from_toml(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert needle in message


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ('pattern = "x"\naxes = ["A"]\ncolour = 1', "unknown key 'colour'"),
        ('axes = ["A"]', "missing key 'pattern'"),
        ('pattern = "x"', "missing key 'axes'"),
        ('pattern = ""\naxes = ["A"]', "key 'pattern' must be a non-empty string"),
        ('pattern = "x"\naxes = "A,B"', "key 'axes' must be an array of axis names"),
        ('pattern = "x"\naxes = ["A", 1]', "key 'axes' must be an array of axis names"),
        ('pattern = "x"\naxes = ["A"]\ngraph = 7', "key 'graph' must be a non-empty string"),
        ('pattern = "x"\naxes = ["(C)"]', "needs at least two parts"),
        ('pattern = "x"\naxes = ["a-b"]', "neither an identifier nor a merge"),
    ],
)
def test_bad_layout_entry_names_its_index(tmp_path: Path, entry: str, needle: str) -> None:
    good = '[[layout]]\npattern = "y"\naxes = ["B"]\n'
    path = write(tmp_path, f"{good}\n[[layout]]\n{entry}\n")
    with pytest.raises(OptionsError) as info:
        Options.from_toml(path)
    message = str(info.value)
    assert message.startswith(f"{path}: [[layout]] entry 2: "), message
    assert needle in message


def test_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "outputs = [\n")
    with pytest.raises(OptionsError, match=r"loam\.toml: not valid TOML"):
        Options.from_toml(path)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(OptionsError, match=r"absent\.toml: no such options file"):
        Options.from_toml(tmp_path / "absent.toml")


def test_python_api_normalizes_and_freezes() -> None:
    options = Options(outputs=["y"], dims={"N": 2}, checkpoints=["a.safetensors"], layout=[LayoutRule("x", ("A",))])
    assert options.outputs == ("y",)
    assert options.checkpoints == (Path("a.safetensors"),)
    assert isinstance(options.layout, tuple)
    with pytest.raises(TypeError):
        options.dims["N"] = 3  # type: ignore[index]
    with pytest.raises(AttributeError):
        options.architecture = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"dims": {"N": -2}}, "dim 'N' must be a non-negative integer"),
        ({"dims": {"N": True}}, "dim 'N' must be a non-negative integer"),
        ({"inline_weights": "yes"}, "'inline_weights' must be True or False"),
        ({"int8_activations": 1}, "'int8_activations' must be True, False or None"),
        ({"outputs": "y"}, "'outputs' must be a list of strings"),
        ({"outputs": ()}, "'outputs' is empty"),
        ({"checkpoints": "w.safetensors"}, "write [path] for one file"),
        ({"architecture": ""}, "'architecture' must be a non-empty string"),
    ],
)
def test_python_api_refuses_wrong_types(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(OptionsError) as info:
        Options(**kwargs)  # type: ignore[arg-type]
    assert needle in str(info.value)


def test_merged_flags_override_and_extend(tmp_path: Path) -> None:
    base = Options.from_toml(write(tmp_path, FULL))
    flag_rule = LayoutRule("x", ("Rows", "Cols"))
    merged = base.merged(
        architecture="other",
        inline_weights=False,
        outputs=["y"],
        dims={"N": 8, "M": 1},
        layout=[flag_rule],
        checkpoints=["cli.safetensors"],
    )
    assert merged.architecture == "other"
    assert merged.inline_weights is False
    assert merged.outputs == ("y",)
    assert dict(merged.dims) == {"N": 8, "S": 0, "M": 1}
    # flag rules are consulted first, then the file's rules, in their order
    assert merged.layout == (flag_rule, *base.layout)
    assert merged.checkpoints == (Path("cli.safetensors"),)
    # the file's options are not changed
    assert dict(base.dims) == {"N": 4, "S": 0}


def test_merged_without_flags_keeps_everything(tmp_path: Path) -> None:
    base = Options.from_toml(write(tmp_path, FULL))
    assert base.merged() == base


def test_int8_activations_is_absent_unless_given_and_a_flag_replaces_the_files(tmp_path: Path) -> None:
    """Absent, each node does as its model asks (None); the file's true or false, then a flag's, decide."""
    assert Options().int8_activations is None
    assert Options.from_toml(write(tmp_path, FULL)).int8_activations is None
    on = Options.from_toml(write(tmp_path, "int8_activations = true\n"))
    assert on.int8_activations is True
    assert on.merged().int8_activations is True
    assert on.merged(int8_activations=False).int8_activations is False


def test_merged_validates_flag_values() -> None:
    with pytest.raises(OptionsError, match="dim 'N'"):
        Options().merged(dims={"N": -1})


def test_example_options_name_every_declared_tensor() -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "mlp" / "loam.toml"
    options = Options.from_toml(example)
    patterns = {rule.pattern for rule in options.layout}
    assert patterns == {"x", "y", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}
    assert options.checkpoints == (example.parent / "mlp.safetensors",)
    assert options.checkpoints[0].is_file()
