"""The API of a module built with gradients (`loam build --grad`): `Grads`, `forward_backward`,
`backward` and `Weights.updated`.

The `differentiate` pass leaves one program computing the outputs and the weights' gradients together
(its inputs: the model's, then `grad.O` per float output; its outputs: the model's, then `grad.W` per
weight), which the module prints as `forward`.  These wrappers split its results the way training code
reads them, with nothing computed twice: `forward_backward` returns (the model's outputs, `Grads`),
`backward` only the `Grads`, and `weights.updated(grads, lr)` the weights one plain SGD step on
(w - lr * g for each weight with a gradient, the others shared).
"""

from __future__ import annotations

from collections.abc import Sequence

from loam.backends.module_classes import tuple_class_source
from loam.dialects.build_contract import GRAD_PREFIX


def grads_source(
    output_names: Sequence[str], weight_attrs: dict[str, str], input_params: dict[str, str], params: Sequence[str]
) -> str:
    """The module's gradient API over its `forward` (whose outputs are `output_names`), `weight_attrs`
    mapping each weight's graph name to its `Weights` attribute in `Weights(...)`'s order,
    `input_params` each input's to its parameter of forward, and forward's parameters `params` (weights
    first).  A gradient's field in `Grads` is its weight's attribute or its input's parameter."""
    first = next(i for i, n in enumerate(output_names) if n.startswith(GRAD_PREFIX))
    model = list(output_names[:first])
    grads = output_names[first:]
    attrs = [{**input_params, **weight_attrs}[n[len(GRAD_PREFIX) :]] for n in grads]
    call = ", ".join(params)
    doc = (
        "The gradients forward_backward computes, by Weights attribute (an input's: by forward's parameter): "
        f"{', '.join(map(repr, grads))}."
    )
    lines = [tuple_class_source("Grads", attrs, doc, [f"ONNX output {n!r}" for n in grads]).rstrip("\n")]
    outputs = "out[0]" if first == 1 else f"tuple(out[:{first}])"
    lines += [
        "",
        "",
        f"def forward_backward({call}) -> tuple:",
        f'    """The model\'s outputs ({", ".join(repr(n) for n in model)}) and the weights\' gradients from one',
        "    pass (the activations the gradients read are the forward's own, never recomputed); the upstream",
        '    gradients of the outputs follow the inputs."""',
        f"    out = forward({call})",
        f"    return {outputs}, Grads(*out[{first}:])",
        "",
        "",
        f"def backward({call}) -> Grads:",
        '    """The weights\' gradients (forward_backward\'s second half)."""',
        f"    return forward_backward({call})[1]",
        "",
        "",
        'def _updated(self: "Weights", grads: Grads, lr: float) -> "Weights":',
        '    """These weights one plain SGD step on: w - lr * g for each weight with a gradient, the others',
        '    as they are."""',
        "    step = dict(zip(grads._fields, grads))",
        "    values = [",
        "        (getattr(self, a) - np.float32(lr) * step[a]).astype(getattr(self, a).dtype)",
        "        if a in step",
        "        else getattr(self, a)",
        f"        for a in {tuple(weight_attrs.values())!r}",
        "    ]",
        "    return Weights(*values)",
        "",
        "",
        "Weights.updated = _updated",
    ]
    return "\n".join(lines) + "\n"
