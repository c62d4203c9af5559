"""`kernel.rnn`, `kernel.gru` and `kernel.lstm` as WGSL: one dispatch per time step (and phase).

The time steps depend on each other, so the host records one dispatch per step (`_p_NAME` returns
the list of (params, workgroups) the module dispatches in order: `STEPPED` marks these kernels for
the printer), each running one invocation per (direction, batch entry, hidden unit).  An invocation
sums its unit's row of W against X at its step and its row of R against the previous state, for
every gate at once, and puts the gates through the node's activations (baked into the shader,
alpha and beta as exact f32 bits, after the clip).  Per-step dispatches keep every invocation's loops
at I + H iterations (llvmpipe stops an invocation after 65,535) and spread a step over as many
workgroups as D x B x H needs; a single kernel looping over time in one workgroup per batch entry
would need barriers over storage and would pass llvmpipe's cap on long sequences.

The state needs no buffer of its own: an entry's state after its k-th step is Y at the position
that step wrote (position k forward, lens[b] - 1 - k in reverse), so step k reads Y at step k - 1's
position (initial_h, or zeros, at k = 0) and writes its own; past an entry's length it writes the
zero Y holds there.  An LSTM's cell state is Y_c, updated in place (each unit reads only its own).
A GRU without linear_before_reset needs the whole of r * H before the hidden gate's product with
R: a first phase per step writes it into Y_h (free until the end), the second computes the step.
A last dispatch writes Y_h (Y at the last step's position, zero for an entry of length 0), zeros
Y_c where the length is 0, and rounds Y, Y_h and Y_c to a half result's precision (the steps keep
f32 in Y, as the numpy kernel computes halves in f32 and narrows at the end).

A sequence_lens entry outside [0, seq_length] is clamped into it here (the numpy module raises its
DataError): the device has no way to stop the forward.

Params: phase (0: GRU's r * H, 1: a step, 2: the finals), the step k, seq_length, batch, hidden,
input size.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.backends.wgsl_kernels.common import FLAT, device_type, f32_bits, kernel, narrow
from loam.backends.wgsl_kernels.elementwise import HELPERS as ELEMENTWISE_HELPERS
from loam.core.errors import UnsupportedError

GATES = {"rnn": 1, "gru": 3, "lstm": 4}
"""Gates per kernel (W's and R's rows are gates x hidden)."""

OPTIONAL = {"rnn": ("b", "lens", "h0"), "gru": ("b", "lens", "h0"), "lstm": ("b", "lens", "h0", "c0", "p")}
"""Each kernel's optional operands in ONNX order (bits 1, 2, 4, 8, 16 of `present`)."""

EXPM1 = """fn expm1_(x: f32) -> f32 {
  // exp(x) - 1 loses the relative precision of small x: its series keeps it.
  if (abs(x) < 0.01) { return x * (1.0 + x * (0.5 + x * (0.16666667 + x * 0.041666668))); }
  return exp(x) - 1.0;
}
"""


def _bits(value: float) -> str:
    """`value` as a WGSL f32 (its exact f32 bits, as numpy's `float32(value)`)."""
    return f32_bits(int(np.array(value, dtype=np.float32).view(np.uint32)))


def _activation(name: str, alpha: float, beta: float) -> str:
    """ONNX's recurrent activation `name` of `v` as a WGSL expression (the numpy kernel's formula)."""
    a, b = _bits(alpha), _bits(beta)
    forms = {
        "Tanh": "tanh_(v)",
        "Sigmoid": "sigmoid_(v)",
        "Relu": "relu_(v)",
        "Affine": f"{a} * v + {b}",
        "LeakyRelu": f"select({a} * v, v, v >= 0.0)",
        "ThresholdedRelu": f"select(0.0, v, v > {a})",
        "ScaledTanh": f"{a} * tanh_({b} * v)",
        "HardSigmoid": f"min(max({a} * v + {b}, 0.0), 1.0)",
        "Elu": f"select({a} * expm1_(v), v, v >= 0.0)",
        "Softsign": "v / (1.0 + abs(v))",
        "Softplus": "softplus_(v)",
    }
    if name not in forms:
        raise UnsupportedError(f"WGSL recurrent: activation {name!r} has no WGSL form")
    return forms[name]


def _activations(activations: str, alphas: tuple[float, ...], betas: tuple[float, ...], per: int) -> str:
    """WGSL functions `act0(d, v)`.. (one per activation slot: f, g, h), each direction's in turn."""
    names = activations.split(",")
    dirs = len(names) // per
    if len(names) != per * dirs or len(alphas) != len(names) or len(betas) != len(names):
        raise UnsupportedError(f"WGSL recurrent: activations {activations!r} do not give {per} per direction")
    out = []
    for j in range(per):
        forms = [_activation(names[d * per + j], alphas[d * per + j], betas[d * per + j]) for d in range(dirs)]
        body = (
            f"  return {forms[0]};\n"
            if dirs == 1
            else f"  if (d == 0u) {{ return {forms[0]}; }}\n  return {forms[1]};\n"
        )
        out.append(f"fn act{j}(d: u32, v: f32) -> f32 {{\n{body}}}\n")
    return "".join(out)


def _indexing(layout: int, dirs: int) -> str:
    """Index helpers over the params (seq_length params[2], batch [3], hidden [4], input [5]): X's
    element (t, b, i), Y's (t, d, b, j) and a state's (d, b, j) in `layout`."""
    if layout:
        x = "(b * params[2] + t) * params[5] + i"
        y = f"((b * params[2] + t) * {dirs}u + d) * params[4] + j"
        s = f"(b * {dirs}u + d) * params[4] + j"
    else:
        x = "(t * params[3] + b) * params[5] + i"
        y = f"((t * {dirs}u + d) * params[3] + b) * params[4] + j"
        s = "(d * params[3] + b) * params[4] + j"
    return (
        f"fn x_at(t: u32, b: u32, i: u32) -> u32 {{ return {x}; }}\n"
        f"fn y_at(t: u32, d: u32, b: u32, j: u32) -> u32 {{ return {y}; }}\n"
        f"fn s_at(d: u32, b: u32, j: u32) -> u32 {{ return {s}; }}\n"
    )


def source_recurrent(
    kind: str,
    operands: list[tuple[str, int]],
    results: list[tuple[str, int]],
    direction: str | None,
    activations: str | None,
    alphas: tuple[float, ...] | None,
    betas: tuple[float, ...] | None,
    clip: float | None,
    layout: int | None,
    flag: int | None,
    present: int | None,
) -> str:
    """The shader of `kind` (rnn, gru, lstm) over `operands` X, W, R and the optional ones `present`
    names, `results` Y, Y_h (and Y_c); `flag` is GRU's linear_before_reset or LSTM's input_forget."""
    known = (direction, activations, alphas, betas, clip, layout, flag, present)
    if any(v is None for v in known):
        raise UnsupportedError(f"WGSL {kind}: parameters known only at run time are not supported")
    assert direction is not None and activations is not None and alphas is not None and betas is not None
    assert clip is not None and layout is not None and flag is not None and present is not None
    elem = operands[0][0]
    if device_type(elem) != "f32":
        raise UnsupportedError(f"WGSL {kind}: element type {elem} is not a float")
    want = 3 if kind == "lstm" else 2
    if len(results) != want:
        raise UnsupportedError(f"WGSL {kind}: {len(results)} results ({want} are given)")
    given = [name for bit, name in enumerate(OPTIONAL[kind]) if present >> bit & 1]
    if len(operands) != 3 + len(given):
        raise UnsupportedError(f"WGSL {kind}: present {present} names {len(given)} operands, not {len(operands) - 3}")
    slot = {name: f"in{3 + k}" for k, name in enumerate(given)}
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[kind]
    per = {"rnn": 1, "gru": 2, "lstm": 3}[kind]
    two_phase = kind == "gru" and not flag
    out_elem = results[0][0]

    helpers = ELEMENTWISE_HELPERS + EXPM1 + _activations(activations, alphas, betas, per) + _indexing(layout, dirs)
    bound = "clamp(v, -c, c)" if clip > 0 else "v"
    helpers += f"fn clip_(v: f32) -> f32 {{\n  let c = {_bits(clip)};\n  return {bound};\n}}\n"
    initial = f"{slot['h0']}[s_at(d, b, jj)]" if "h0" in slot else "0.0"
    helpers += (
        "fn prev(at0: bool, tp: u32, d: u32, b: u32, jj: u32) -> f32 {\n"
        "  // The state before this step: initial_h (or zeros) at the first step, else Y where the last wrote\n"
        f"  if (at0) {{ return {initial}; }}\n"
        "  return out0[y_at(tp, d, b, jj)];\n"
        "}\n"
    )
    rows = f"{g}u * params[4]"  # rows of W and R per direction
    if "b" in slot:
        helpers += (
            f"fn wb(d: u32, row: u32) -> f32 {{ return {slot['b']}[d * 2u * {rows} + row]; }}\n"
            f"fn rb(d: u32, row: u32) -> f32 {{ return {slot['b']}[d * 2u * {rows} + {rows} + row]; }}\n"
        )
    else:
        helpers += "fn wb(d: u32, row: u32) -> f32 { return 0.0; }\nfn rb(d: u32, row: u32) -> f32 { return 0.0; }\n"

    body = FLAT.replace("let i =", "let n =") + (
        "  let phase = params[0];\n"
        "  let k = params[1];\n"
        "  let steps = params[2];\n"
        "  let hidden = params[4];\n"
        "  let nin = params[5];\n"
        f"  let count = {dirs}u * params[3] * hidden;\n"
        "  let j = n % hidden;\n"
        "  let b = (n / hidden) % params[3];\n"
        "  let d = n / max(hidden * params[3], 1u);\n"
    )
    lens = f"u32(clamp({slot['lens']}[b], 0, i32(steps)))" if "lens" in slot else "steps"
    body += f"  let seq_len = select(0u, {lens}, n < count);\n"
    body += f"  let rev = {'true' if direction == 'reverse' else 'd == 1u'};\n"
    # -- the finals -----------------------------------------------------------------------------------
    body += "  if (phase == 2u) {\n    if (n < count) {\n      let s = s_at(d, b, j);\n"
    body += "      var h = 0.0;\n      if (seq_len > 0u) { h = out0[y_at(select(seq_len - 1u, 0u, rev), d, b, j)]; }\n"
    body += f"      out1[s] = {narrow(results[1][0], 'h')};\n"
    if kind == "lstm":
        body += f"      out2[s] = select({narrow(results[2][0], 'out2[s]')}, 0.0, seq_len == 0u);\n"
    body += "    }\n"
    if narrow(out_elem, "v") != "v":
        body += f"    if (n < steps * count) {{ out0[n] = {narrow(out_elem, 'out0[n]')}; }}\n"
    body += "    return;\n  }\n"
    # -- a step ---------------------------------------------------------------------------------------
    body += (
        "  if (n >= count) { return; }\n"
        "  if (k >= seq_len) {\n"
        "    if (phase == 1u) { out0[y_at(k, d, b, j)] = 0.0; }  // past the entry's length\n"
        "    return;\n"
        "  }\n"
        "  let t = select(k, seq_len - 1u - k, rev);\n"
        "  let tp = select(k - 1u, seq_len - k, rev);\n"
        "  let at0 = k == 0u;\n"
        f"  let base = d * {rows};\n"
    )
    # The gates each phase sums: (gate, what R multiplies: the state, or GRU's r * H in Y_h).
    if two_phase:
        body += "  if (phase == 0u) {\n"
        body += _sums([(1, "h")], "    ")
        body += "    let r = act0(d, clip_((xg1 + (wb(d, hidden + j) + rb(d, hidden + j))) + hg1));\n"
        body += "    out1[s_at(d, b, j)] = r * prev(at0, tp, d, b, j);\n    return;\n  }\n"
        body += _sums([(0, "h"), (2, "rh")], "  ")
    else:
        body += _sums([(gate, "h") for gate in range(g)], "  ")
    body += "  let own = prev(at0, tp, d, b, j);\n"
    if kind == "rnn":
        body += "  let hn = act0(d, clip_((xg0 + (wb(d, j) + rb(d, j))) + hg0));\n"
    elif kind == "gru":
        body += "  let z = act0(d, clip_((xg0 + (wb(d, j) + rb(d, j))) + hg0));\n"
        hrow = "2u * hidden + j"
        if flag:
            body += "  let r = act0(d, clip_((xg1 + (wb(d, hidden + j) + rb(d, hidden + j))) + hg1));\n"
            body += f"  let hh = act1(d, clip_((xg2 + wb(d, {hrow})) + r * (hg2 + rb(d, {hrow}))));\n"
        else:
            body += f"  let hh = act1(d, clip_((xg2 + (wb(d, {hrow}) + rb(d, {hrow}))) + hg2));\n"
        body += "  let hn = (1.0 - z) * hh + z * own;\n"
    else:
        body += "  let s = s_at(d, b, j);\n"
        c0 = f"{slot['c0']}[s]" if "c0" in slot else "0.0"
        body += f"  var c = out2[s];\n  if (at0) {{ c = {c0}; }}\n"

        def peep(k: int) -> str:
            return f"{slot['p']}[d * 3u * hidden + {k}u * hidden + j]" if "p" in slot else "0.0"

        def gate(k: int) -> str:
            row = f"{k}u * hidden + j"
            return f"(xg{k} + (wb(d, {row}) + rb(d, {row}))) + hg{k}"

        body += f"  let ig = act0(d, clip_({gate(0)} + {peep(0)} * c));\n"
        if flag:
            body += "  let fg = 1.0 - ig;\n"
        else:
            body += f"  let fg = act0(d, clip_({gate(2)} + {peep(2)} * c));\n"
        body += f"  let cn = fg * c + ig * act1(d, clip_({gate(3)}));\n"
        body += f"  let og = act0(d, clip_({gate(1)} + {peep(1)} * cn));\n"
        body += "  let hn = og * act2(d, cn);\n  out2[s] = cn;\n"
    body += "  out0[y_at(t, d, b, j)] = hn;\n"
    return kernel([e for e, _ in results], [e for e, _ in operands], body, helpers)


def _sums(gates: list[tuple[int, str]], pad: str) -> str:
    """WGSL lines summing, for each (gate, what) of `gates`, its W row against X at step t (`xgK`) and
    its R row against the previous state (`what` h) or GRU's r * H kept in Y_h (`what` rh) (`hgK`)."""
    lines = [f"var xg{k} = 0.0;\nvar hg{k} = 0.0;" for k, _ in gates]
    lines.append("for (var i = 0u; i < nin; i = i + 1u) {\n  let xv = in0[x_at(t, b, i)];")
    for k, _ in gates:
        lines.append(f"  xg{k} = xg{k} + in1[(base + {k}u * hidden + j) * nin + i] * xv;")
    lines.append("}\nfor (var jj = 0u; jj < hidden; jj = jj + 1u) {")
    if any(what == "h" for _, what in gates):
        lines.append("  let hv = prev(at0, tp, d, b, jj);")
    if any(what == "rh" for _, what in gates):
        lines.append("  let rh = out1[s_at(d, b, jj)];")
    for k, what in gates:
        lines.append(
            f"  hg{k} = hg{k} + in2[(base + {k}u * hidden + j) * hidden + jj] * {'hv' if what == 'h' else 'rh'};"
        )
    lines.append("}")
    return "".join(pad + line.replace("\n", "\n" + pad) + "\n" for line in lines)


def source_rnn(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """The RNN shader (see the module's docstring)."""
    return _source("rnn", operands, results, params, 0)


def source_gru(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """The GRU shader: two phases per step without linear_before_reset."""
    return _source("gru", operands, results, params, params.get("linear_before_reset"))


def source_lstm(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """The LSTM shader: Y_c holds the cell state from step to step."""
    return _source("lstm", operands, results, params, params.get("input_forget"))


def _source(
    kind: str, operands: list[tuple[str, int]], results: list[tuple[str, int]], params: dict[str, object], flag: object
) -> str:
    def tup(key: str) -> tuple[float, ...] | None:
        value = params.get(key)
        return None if value is None else tuple(float(v) for v in value)  # type: ignore[attr-defined]  # a tuple

    clip = params.get("clip")
    return source_recurrent(
        kind, operands, results,
        None if params.get("direction") is None else str(params["direction"]),
        None if params.get("activations") is None else str(params["activations"]),
        tup("alphas"), tup("betas"),
        None if clip is None else float(clip),  # type: ignore[arg-type]  # a float parameter
        None if params.get("layout") is None else int(params["layout"]),  # type: ignore[call-overload]  # an int
        None if flag is None else int(flag),  # type: ignore[call-overload]  # an int parameter
        None if params.get("present") is None else int(params["present"]),  # type: ignore[call-overload]  # an int
    )  # fmt: skip


# -- host side: the dispatches ---------------------------------------------------------------------


def _p_recurrent(
    shapes: tuple[tuple[int, ...], ...], layout: int, two_phase: bool
) -> list[tuple[tuple[int, ...], int]]:
    """The dispatches of a recurrent kernel over operands X, W, R (`shapes` starts with theirs): per
    step (phase 0 first where `two_phase`) one invocation per (direction, batch entry, hidden unit),
    then the finals over the larger of that and Y."""
    x, w, r = shapes[0], shapes[1], shapes[2]
    steps, batch = (x[1], x[0]) if layout else (x[0], x[1])
    dirs, hidden, size = w[0], r[2], x[2]
    count = dirs * batch * hidden
    grid = (count + 63) // 64
    out: list[tuple[tuple[int, ...], int]] = []
    for k in range(steps):
        if two_phase:
            out.append(((0, k, steps, batch, hidden, size), grid))
        out.append(((1, k, steps, batch, hidden, size), grid))
    out.append(((2, 0, steps, batch, hidden, size), (max(steps, 1) * count + 63) // 64))
    return out


def _p_rnn(
    shapes: tuple[tuple[int, ...], ...],
    direction: str,
    activations: str,
    alphas: tuple[float, ...],
    betas: tuple[float, ...],
    clip: float,
    layout: int,
    present: int,
) -> list[tuple[tuple[int, ...], int]]:
    """The RNN kernel's dispatches: one per step, then the finals (`_p_recurrent`)."""
    return _p_recurrent(shapes, layout, False)


def _p_gru(
    shapes: tuple[tuple[int, ...], ...],
    direction: str,
    activations: str,
    alphas: tuple[float, ...],
    betas: tuple[float, ...],
    clip: float,
    layout: int,
    linear_before_reset: int,
    present: int,
) -> list[tuple[tuple[int, ...], int]]:
    """The GRU kernel's dispatches: two per step without linear_before_reset, then the finals."""
    return _p_recurrent(shapes, layout, not linear_before_reset)


def _p_lstm(
    shapes: tuple[tuple[int, ...], ...],
    direction: str,
    activations: str,
    alphas: tuple[float, ...],
    betas: tuple[float, ...],
    clip: float,
    layout: int,
    input_forget: int,
    present: int,
) -> list[tuple[tuple[int, ...], int]]:
    """The LSTM kernel's dispatches: one per step, then the finals."""
    return _p_recurrent(shapes, layout, False)


PIECES: dict[str, Callable[..., object]] = {
    "_p_recurrent": _p_recurrent,
    "_p_rnn": _p_rnn,
    "_p_gru": _p_gru,
    "_p_lstm": _p_lstm,
}
SOURCES: dict[str, object] = {"rnn": source_rnn, "gru": source_gru, "lstm": source_lstm}
STEPPED = frozenset(SOURCES)
"""The kernels whose `_p_NAME` gives a list of dispatches (params, workgroups) to record in order."""
