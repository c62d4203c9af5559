"""The `interface` option: re-declaring a graph input's or output's dims, from TOML, flags and the API."""

from __future__ import annotations

from pathlib import Path

import pytest

import loam
from loam.core.errors import OptionsError
from loam.driver.options import Options
from loam.tools.loam_main import _interface_flag

MLP = Path(__file__).resolve().parents[1] / "examples" / "mlp"


def test_the_toml_table_reads_names_and_numbers(tmp_path: Path) -> None:
    toml = tmp_path / "loam.toml"
    toml.write_text('[interface]\nattention_mask = ["batch_size", "past + 1"]\nx = [4, "In"]\n', encoding="utf-8")
    options = Options.from_toml(toml)
    assert dict(options.interface) == {"attention_mask": ("batch_size", "past + 1"), "x": (4, "In")}


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('x = "batch"', "must be a list of dims"),
        ('x = ["b", -1]', "axis 1 must be a dim_param name or a non-negative integer"),
        ('x = ["b", true]', "axis 1 must be a dim_param name or a non-negative integer"),
        ('x = [""]', "axis 0"),
    ],
)
def test_a_malformed_entry_is_refused_naming_it(tmp_path: Path, table: str, message: str) -> None:
    toml = tmp_path / "loam.toml"
    toml.write_text(f"[interface]\n{table}\n", encoding="utf-8")
    with pytest.raises(OptionsError, match=message):
        Options.from_toml(toml)


def test_the_flag_reads_names_and_numbers() -> None:
    assert _interface_flag("attention_mask=batch_size,attention_length") == (
        "attention_mask",
        ("batch_size", "attention_length"),
    )
    assert _interface_flag("x=4,In") == ("x", (4, "In"))


def mlp_options(**interface: tuple[int | str, ...]) -> Options:
    base = Options.from_toml(MLP / "loam.toml")
    return base.merged(interface=interface)


def test_a_redeclared_input_takes_the_new_dims() -> None:
    """The MLP declares x [N, 8]; re-declared [Rows, 8], `forward` names the batch Rows."""
    built = loam.build(MLP / "mlp.onnxtext", options=mlp_options(x=("Rows", 8)))
    assert "Rows" in built.source and "'N'" not in built.source


def test_an_unknown_tensor_is_refused_naming_the_graphs_inputs_and_outputs() -> None:
    with pytest.raises(OptionsError, match=r"interface: 'nothing' is neither an input nor an output .*inputs: x"):
        loam.build(MLP / "mlp.onnxtext", options=mlp_options(nothing=("N",)))


def test_another_rank_is_refused() -> None:
    with pytest.raises(OptionsError, match=r"graph input 'x' has 2 axes .* the option gives 3"):
        loam.build(MLP / "mlp.onnxtext", options=mlp_options(x=("N", 8, 1)))
