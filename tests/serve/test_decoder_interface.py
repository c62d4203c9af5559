"""The one decoder-interface check `loam generate` and `loam serve` share: what it reads and what it refuses.

The modules' declarations are written out as a numpy module prints them (`INPUTS`: name, dtype, extents with
None where the call decides; `OUTPUTS`: names), so each refusal is seen without building a model.
"""

from __future__ import annotations

import numpy as np
import pytest

from loam.serve.package import PackageError
from loam.text.decoder import DecoderInterface
from loam.text.generate import GenerateError

PAST = (
    ("past_key_values.0.key", "float32", (None, 2, None, 4)),
    ("past_key_values.0.value", "float16", (None, 2, None, 4)),
)
INPUTS = (("input_ids", "int64", (None, None)), ("attention_mask", "int64", (None, None)), *PAST)
OUTPUTS = ("logits", "present.0.key", "present.0.value")
SERVED = ("input_ids", "attention_mask")  # what loam serve's text role needs: it pads rows, and masks the padding


def test_a_decoder_is_read_with_its_pasts_their_presents_and_their_layers() -> None:
    interface = DecoderInterface.of(INPUTS, OUTPUTS, "m.py", GenerateError)
    assert interface.order == ("input_ids", "attention_mask", "past_key_values.0.key", "past_key_values.0.value")
    assert interface.past_names == ("past_key_values.0.key", "past_key_values.0.value")
    assert interface.present_of == {
        "past_key_values.0.key": "present.0.key",
        "past_key_values.0.value": "present.0.value",
    }
    assert interface.layers == {
        "past_key_values.0.key": (2, 4, np.dtype("float32")),
        "past_key_values.0.value": (2, 4, np.dtype("float16")),
    }
    assert interface.dtypes["input_ids"] == np.dtype("int64")


def test_generate_drives_a_decoder_without_a_mask_and_serve_refuses_it() -> None:
    unmasked = tuple(i for i in INPUTS if i[0] != "attention_mask")
    assert DecoderInterface.of(unmasked, OUTPUTS, "m.py", GenerateError).order[0] == "input_ids"
    with pytest.raises(PackageError, match=r"^model.json stage 'decoder': the decoder has no input 'attention_mask'$"):
        DecoderInterface.of(unmasked, OUTPUTS, "model.json stage 'decoder'", PackageError, needs=SERVED)


@pytest.mark.parametrize(
    ("inputs", "outputs", "words"),
    [
        ((), OUTPUTS, "declares no INPUTS/OUTPUTS"),
        (None, OUTPUTS, "declares no INPUTS/OUTPUTS"),
        (INPUTS[1:], OUTPUTS, "has no input 'input_ids'"),
        (INPUTS, OUTPUTS[1:], "has no output 'logits'"),
        (INPUTS[:2], ("logits",), "takes no past_key_values.*"),
        ((*INPUTS, ("token_type_ids", "int64", (None, None))), OUTPUTS, "input 'token_type_ids' is not one a decoder"),
        (INPUTS, OUTPUTS[:2], "input 'past_key_values.0.value' has no output 'present.0.value'"),
        ((*INPUTS[:3], ("past_key_values.0.value", "float32", (None, None, None, 4))), OUTPUTS, "with fixed heads"),
        ((*INPUTS[:3], ("past_key_values.0.value", "float32", (None, 2, 4))), OUTPUTS, "with fixed heads"),
    ],
)
def test_what_is_not_a_decoder_is_refused_naming_what_is_missing(inputs: object, outputs: object, words: str) -> None:
    with pytest.raises(GenerateError) as caught:
        DecoderInterface.of(inputs, outputs, "m.py", GenerateError)
    assert str(caught.value).startswith("m.py: ") and words in str(caught.value), str(caught.value)
