"""JavaScript for the WGSL module's `forward`: its statements, translated one by one.

The browser module runs the plan the WGSL module's printer made (the same input and owed checks, the
same buffers, the same dispatches with the same parameters), so rather than plan again, its printer
translates the Python `forward` the WGSL printer wrote.  That function is Loam's own output in a
small, closed vocabulary (`_env` bindings, `_check_input`/`_owe`/`derived_extent`, `g.write`,
`g.dispatch(SHADER, buffers, *_p_NAME(...))`, `g.read`, `if`/`else` over a condition; with host
fallback, `g.host` downloads and the numpy kernels `HOST_KERNELS` lists, which host.js defines), and
each form has one JavaScript spelling here; anything else stops the build naming what the browser target does
not run yet, so a module is never printed with a statement it would get wrong.

Python's integer semantics are kept where they differ: `//` and `%` floor (`_fdiv`, `_mod`), tuples
compare by value (`_eq`), keyword arguments take their place in the runtime function's parameters
(the same `_p_NAME` signature the Python piece has, `parameters()`).  Downloads are recorded in the
forward's one command encoder and awaited once, at `return` (`g.done()`).
"""

from __future__ import annotations

import ast
import inspect
import json
from collections.abc import Callable, Sequence

from loam.backends.wgsl_kernel_printer import kernel_pieces
from loam.core.errors import UnsupportedError
from loam.runtime import kernels as library
from loam.runtime import prologue

# The runtime functions forward may call, each by its Python piece (whose parameters order a call's
# keywords); runtime.js defines each under the same name.
PORTED = (
    "_check_input", "_read_back", "_check_spelled", "_owe", "_room", "derived_extent",
    "_row_major", "_p_tile_program", "_p_zip", "_p_copy", "_p_permute", "_p_slice", "_p_place", "_p_range",
    "_p_gather", "_p_gather_elements",
    "_p_gather_nd", "_p_cumsum", "_p_conv", "_p_pool", "_p_softmax", "_p_reduce", "_p_matmul", "_p_matmul_packed",
    "_p_gather_packed", "_p_trilu", "_p_scatter_nd", "_p_conv_transpose", "_p_scatter_elements", "_p_normalize",
    "_p_pad", "_p_recurrent", "_p_rnn", "_p_gru", "_p_lstm",
)  # fmt: skip

# JavaScript's reserved words: a Python identifier spelling one is renamed (`new` -> `new_`).
RESERVED = frozenset(
    "await break case catch class const continue debugger default delete do else enum export extends "
    "false finally for function if implements import in instanceof interface let new null package "
    "private protected public return static super switch this throw true try typeof var void while "
    "with yield arguments eval undefined NaN Infinity".split()
)

# The numpy kernels the page computes itself (`--host-fallback`: backends/browser/host.js defines each
# under the same name), with the values each keyword may take there (None: any).  A host kernel not
# listed, or a keyword value outside its set, stops the build naming it.
HOST_KERNELS: dict[str, dict[str, frozenset[object] | None]] = {
    "kernel_nonzero": {},
    "kernel_range_of": {},
    "kernel_reduce": {"kind": frozenset({"sum", "prod", "mean", "max", "min"}), "axes": None, "keepdims": None},
    "kernel_random": {
        "dist": frozenset({"normal", "uniform", "bernoulli"}),
        "a": None,
        "b": None,
        "shape": None,
        "seed": None,
        "to": frozenset({"float32", "float16", "int64", "int32", "bool"}),
    },
}

NUMPY_DTYPES = {
    "float32": "float32", "float16": "float16", "int64": "int64", "int32": "int32", "int16": "int16",
    "int8": "int8", "uint8": "uint8", "uint16": "uint16", "bool_": "bool",
}  # fmt: skip

SAFE = 2**53


def parameters() -> dict[str, list[str]]:
    """Each ported runtime function's and host kernel's Python parameters, in order."""
    pieces: dict[str, Callable[..., object]] = {**prologue.PIECES, **kernel_pieces(), **library.PIECES}
    return {
        name: [p.name for p in inspect.signature(pieces[name]).parameters.values() if p.kind is not p.VAR_POSITIONAL]
        for name in (*PORTED, *HOST_KERNELS)
    }


def ident(name: str) -> str:
    """A Python identifier as a JavaScript one."""
    return f"{name}_" if name in RESERVED else name


class ForwardTranslator:
    """Translates the WGSL module's `forward` (its `ast.FunctionDef`) into an async JS function."""

    def __init__(self, outputs: Sequence[str]) -> None:
        self.outputs = list(outputs)  # the ONNX output names, in order
        self.params = parameters()
        self.locals: set[str] = set()

    def fail(self, node: ast.AST, what: str) -> UnsupportedError:
        text = ast.unparse(node)
        if len(text) > 160:
            text = text[:157] + "..."
        return UnsupportedError(f"the browser target has no JavaScript form of {what} yet: `{text}`")

    # -- the function ------------------------------------------------------------------------------

    def function(self, fn: ast.FunctionDef) -> str:
        """`fn` as an exported async function, its docstring as the comment before it."""
        args = [ident(a.arg) for a in fn.args.args]
        body = fn.body[1:] if _is_docstring(fn.body[0]) else fn.body
        lines = self.block(body, 1)
        declared = sorted(self.locals - set(args) - {ident(a.arg) for a in fn.args.kwonlyargs})
        if fn.args.kwonlyargs:  # keyword-only parameters (`seed`): one options object, last
            if any(d is None or not isinstance(d, ast.Constant) for d in fn.args.kw_defaults):
                raise self.fail(fn.args, "a keyword-only parameter without a constant default")
            pairs = zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True)
            named = [f"{ident(a.arg)} = {self.expr(d)}" for a, d in pairs]  # type: ignore[arg-type]  # checked above
            args.append("{ " + ", ".join(named) + " } = {}")
        head = [f"  let {', '.join(declared)};"] if declared else []
        doc = (ast.get_docstring(fn) or "").splitlines()
        comment = "/**\n * " + "\n * ".join(comment_safe(line) for line in doc) + "\n */\n"
        return comment + f"export async function forward({', '.join(args)}) {{\n" + "\n".join(head + lines) + "\n}\n"

    def block(self, stmts: Sequence[ast.stmt], depth: int) -> list[str]:
        out: list[str] = []
        for s in stmts:
            out += self.statement(s, depth)
        return out

    def statement(self, s: ast.stmt, depth: int) -> list[str]:
        pad = "  " * depth
        if isinstance(s, ast.Pass):
            return []
        if isinstance(s, ast.AnnAssign) and s.value is not None:
            return [f"{pad}{self.target(s.target)} = {self.expr(s.value)};"]
        if isinstance(s, ast.Assign) and len(s.targets) == 1:
            return [f"{pad}{self.target(s.targets[0])} = {self.expr(s.value)};"]
        if isinstance(s, ast.AugAssign) and isinstance(s.op, (ast.Add, ast.Sub)):
            op = "+=" if isinstance(s.op, ast.Add) else "-="
            return [f"{pad}{self.target(s.target)} {op} {self.expr(s.value)};"]
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            return [f"{pad}{self.expr(s.value)};"]
        if isinstance(s, ast.If):
            lines = [f"{pad}if ({self.expr(s.test)}) {{", *self.block(s.body, depth + 1)]
            if s.orelse:
                lines += [f"{pad}}} else {{", *self.block(s.orelse, depth + 1)]
            return [*lines, f"{pad}}}"]
        if isinstance(s, ast.With) and ast.unparse(s.items[0].context_expr) == "g.lock" and len(s.items) == 1:
            return [
                f"{pad}const _release = await g.acquire();  // forward's calls take turns on the device",
                f"{pad}try {{",
                *self.block(s.body, depth + 1),
                f"{pad}  await g.done();  // the one command encoder submitted, the outputs downloaded",
                f"{pad}}} finally {{",
                f"{pad}  await g.abandon();",
                f"{pad}  _release();",
                f"{pad}}}",
            ]
        if isinstance(s, ast.For) and isinstance(s.target, ast.Name):
            self.locals.discard(s.target.id)
            head = f"{pad}for (const {ident(s.target.id)} of {self.expr(s.iter)}) {{"
            return [head, *self.block(s.body, depth + 1), f"{pad}}}"]
        if isinstance(s, ast.Return) and s.value is not None:
            return [f"{pad}return {self.returned(s.value)};"]
        raise self.fail(s, "this statement")

    def returned(self, value: ast.expr) -> str:
        """One output: its tensor; several (`Outputs(...)`): an object keyed by the ONNX output names."""
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "Outputs":
            items = [f"{json.dumps(n)}: _value({self.expr(a)})" for n, a in zip(self.outputs, value.args, strict=True)]
            return "{" + ", ".join(items) + "}"
        return f"_value({self.expr(value)})"

    def target(self, t: ast.expr) -> str:
        if isinstance(t, ast.Name):
            self.locals.add(ident(t.id))
            return ident(t.id)
        if isinstance(t, ast.Subscript):
            return self.expr(t)
        if isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts):
            return "[" + ", ".join(self.target(e) for e in t.elts) + "]"
        raise self.fail(t, "this assignment target")

    # -- expressions --------------------------------------------------------------------------------

    def expr(self, e: ast.expr) -> str:
        if isinstance(e, ast.Constant):
            return self.constant(e)
        if isinstance(e, ast.Name):
            return ident(e.id)
        if isinstance(e, (ast.Tuple, ast.List)):
            return "[" + ", ".join(self.expr(x) for x in e.elts) + "]"
        if isinstance(e, ast.Dict) and not e.keys:
            return "{}"
        if isinstance(e, ast.Starred):
            return "..." + self.expr(e.value)
        if isinstance(e, ast.Subscript):
            return self.subscript(e)
        if isinstance(e, ast.Attribute):
            return self.attribute(e)
        if isinstance(e, ast.BinOp):
            return self.binop(e)
        if isinstance(e, ast.UnaryOp):
            if isinstance(e.op, ast.USub):
                return f"(-{self.expr(e.operand)})"
            if isinstance(e.op, ast.Not):
                return f"!({self.expr(e.operand)})"
        if isinstance(e, ast.BoolOp):
            op = " && " if isinstance(e.op, ast.And) else " || "
            return "(" + op.join(self.expr(v) for v in e.values) + ")"
        if isinstance(e, ast.Compare) and len(e.ops) == 1:
            return self.compare(e.left, e.ops[0], e.comparators[0])
        if isinstance(e, ast.IfExp):
            return f"({self.expr(e.test)} ? {self.expr(e.body)} : {self.expr(e.orelse)})"
        if isinstance(e, ast.Call):
            return self.call(e)
        if isinstance(e, ast.GeneratorExp) and len(e.generators) == 1 and not e.generators[0].ifs:
            gen = e.generators[0]
            if isinstance(gen.target, ast.Name):
                return f"{self.expr(gen.iter)}.map(({ident(gen.target.id)}) => {self.expr(e.elt)})"
        raise self.fail(e, "this expression")

    def constant(self, e: ast.Constant) -> str:
        v = e.value
        if isinstance(v, bool):
            return "true" if v else "false"
        if v is None:
            return "null"
        if isinstance(v, int):
            if abs(v) >= SAFE:
                raise self.fail(e, "an integer past 2^53 (JavaScript's exact integers)")
            return str(v)
        if isinstance(v, float) and v == v and abs(v) != float("inf"):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        raise self.fail(e, "this constant")

    def subscript(self, e: ast.Subscript) -> str:
        if isinstance(e.slice, ast.Slice):
            raise self.fail(e, "a slice")
        return f"{self.expr(e.value)}[{self.expr(e.slice)}]"

    def attribute(self, e: ast.Attribute) -> str:
        base = ast.unparse(e.value)
        if base == "np" and e.attr in NUMPY_DTYPES:
            return json.dumps(NUMPY_DTYPES[e.attr])
        if e.attr == "ndim":
            return f"{self.expr(e.value)}.shape.length"
        if e.attr in ("shape", "dtype") or base == "g":
            return f"{self.expr(e.value)}.{e.attr}"
        raise self.fail(e, "this attribute")

    def binop(self, e: ast.BinOp) -> str:
        a, b = self.expr(e.left), self.expr(e.right)
        if isinstance(e.op, ast.Add):
            return f"({a} + {b})"
        if isinstance(e.op, ast.Sub):
            return f"({a} - {b})"
        if isinstance(e.op, ast.Mult):
            return f"({a} * {b})"
        if isinstance(e.op, ast.FloorDiv):
            return f"_fdiv({a}, {b})"
        if isinstance(e.op, ast.Mod):
            return f"_mod({a}, {b})"
        raise self.fail(e, "this operator")

    def compare(self, left: ast.expr, op: ast.cmpop, right: ast.expr) -> str:
        text = ast.unparse(left)
        if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value is None:
            return f"({self.expr(left)} {'==' if isinstance(op, ast.Is) else '!='} null)"  # null or undefined
        if isinstance(op, ast.Is) and text.endswith(".__class__") and ast.unparse(right) == "np.ndarray":
            assert isinstance(left, ast.Attribute)
            return f"_isTensor({self.expr(left.value)})"
        a, b = self.expr(left), self.expr(right)
        if isinstance(op, (ast.Eq, ast.NotEq)) and (_tuple_like(left) or _tuple_like(right)):
            return f"{'' if isinstance(op, ast.Eq) else '!'}_eq({a}, {b})"
        js = {ast.Eq: "===", ast.NotEq: "!==", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}.get(type(op))
        if js is None:
            raise self.fail(left, "this comparison")
        return f"({a} {js} {b})"

    def call(self, e: ast.Call) -> str:
        func = ast.unparse(e.func)
        # bool(np.asarray(X).reshape(-1)[0]): the truth of a one-element input (an If's condition).
        if func == "bool" and len(e.args) == 1 and ast.unparse(e.args[0]).startswith("np.asarray("):
            inner = e.args[0]
            while not (isinstance(inner, ast.Call) and ast.unparse(inner.func) == "np.asarray"):
                inner = inner.value if isinstance(inner, ast.Subscript) else inner.func.value  # type: ignore[attr-defined]  # `.reshape(-1)`
            return f"_truth({self.expr(inner.args[0])})"
        if func in ("min", "max") and not e.keywords:
            return f"Math.{func}({', '.join(self.expr(a) for a in e.args)})"
        if func == "tuple" and len(e.args) == 1:
            return self.expr(e.args[0])
        if func == "_gpu":
            return "await _gpu()"
        if func == "_resident":
            return f"{self.expr(e.args[0])}.resident({self.expr(e.args[1])})"
        if func.startswith("g."):
            return self.gpu_call(e, func[2:])
        if func in HOST_KERNELS:
            return self.host_call(e, func)
        if func in self.params:
            return f"{func}({', '.join(self.arguments(e, func))})"
        # Extents computed on the host: `np.array([...], dtype=np.int64).reshape(SHAPE)`, a `g.values` buffer.
        if (
            isinstance(e.func, ast.Attribute) and e.func.attr == "reshape" and len(e.args) == 1
            and isinstance(made := e.func.value, ast.Call) and ast.unparse(made.func) == "np.array"
            and len(made.args) == 1 and [k.arg for k in made.keywords] == ["dtype"]
        ):  # fmt: skip
            dtype = self.dtype(made.keywords[0].value)
            return f"tensor({dtype}, {self.expr(made.args[0])}, {self.expr(e.args[0])})"
        if func == "np.random.default_rng" and len(e.args) == 1 and not e.keywords:
            return f"new _Rng({self.expr(e.args[0])})"
        # A host kernel's cast: `x.astype(np.int64)`, `np.asarray(x, dtype='int64')`.
        if isinstance(e.func, ast.Attribute) and e.func.attr == "astype" and len(e.args) == 1 and not e.keywords:
            return f"_astype({self.expr(e.func.value)}, {self.dtype(e.args[0])})"
        if func == "np.asarray" and len(e.args) == 1 and [k.arg for k in e.keywords] == ["dtype"]:
            return f"_astype({self.expr(e.args[0])}, {self.dtype(e.keywords[0].value)})"
        if func.startswith("kernel_"):
            raise UnsupportedError(
                f"the browser target has no JavaScript form of the host kernel {func} yet (`{ast.unparse(e)[:120]}`); "
                "build with --backend wgsl --host-fallback to run this model through wgpu"
            )
        if func.startswith("_p_"):
            raise UnsupportedError(
                f"the browser target has no JavaScript form of the kernel parameters {func} yet "
                f"(`{ast.unparse(e)[:120]}`); build with --backend wgsl to run this model through wgpu"
            )
        raise self.fail(e, "this call")

    def arguments(self, e: ast.Call, func: str) -> list[str]:
        """`e`'s arguments in `func`'s parameter order (keywords placed, defaults left to JavaScript)."""
        names = self.params[func]
        args: list[str | None] = [self.expr(a) for a in e.args]
        for kw in e.keywords:
            if kw.arg is None or kw.arg not in names:
                raise self.fail(e, f"keyword {kw.arg} of {func}")
            at = names.index(kw.arg)
            args += [None] * (at + 1 - len(args))
            args[at] = self.expr(kw.value)
        return ["undefined" if a is None else a for a in args]

    def host_call(self, e: ast.Call, func: str) -> str:
        """A numpy kernel the page computes (host.js), once each keyword it is given is one it computes."""
        allowed = HOST_KERNELS[func]
        for kw in e.keywords:
            if kw.arg not in allowed:
                raise self.fail(e, f"keyword {kw.arg} of the host kernel {func}")
            values = allowed[kw.arg]
            if values is not None and not (isinstance(kw.value, ast.Constant) and kw.value.value in values):
                computed = ", ".join(sorted(map(str, values)))
                raise self.fail(e, f"{func} with {kw.arg}={ast.unparse(kw.value)} (the page computes {computed})")
        return f"{func}({', '.join(self.arguments(e, func))})"

    def dtype(self, e: ast.expr) -> str:
        """A dtype argument (`np.int64`, `'int64'`) as its numpy name, one a host tensor can hold."""
        if isinstance(e, ast.Constant) and e.value in NUMPY_DTYPES.values():
            return json.dumps(e.value)
        if isinstance(e, ast.Attribute) and ast.unparse(e.value) == "np" and e.attr in NUMPY_DTYPES:
            return json.dumps(NUMPY_DTYPES[e.attr])
        raise self.fail(e, "this dtype")

    def gpu_call(self, e: ast.Call, method: str) -> str:
        args = ", ".join(self.expr(a) for a in e.args)
        if method in ("write", "begin", "end", "dispatch", "copy", "late", "pool", "read", "resume", "values"):
            return f"g.{method}({args})"
        if method in ("sync", "host"):  # the ones that wait: the device's values come down
            return f"(await g.{method}({args}))"
        raise self.fail(e, f"the device call g.{method}")


def comment_safe(text: str) -> str:
    """`text` safe inside a JavaScript comment: names from the model file (an input called `*/ ...`) can
    neither end the comment nor start a line of code."""
    return " ".join(text.replace("*/", "* /").split())


def _is_docstring(s: ast.stmt) -> bool:
    return isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)


def _tuple_like(e: ast.expr) -> bool:
    return isinstance(e, (ast.Tuple, ast.List)) or (isinstance(e, ast.Attribute) and e.attr == "shape")


def translate_forward(source: str, outputs: Sequence[str]) -> str:
    """The JS of the `forward` function in the WGSL module `source`."""
    tree = ast.parse(source)
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "forward"]
    if len(found) != 1:
        raise UnsupportedError("the WGSL module has no forward function to translate")
    translator = ForwardTranslator(outputs)
    return translator.function(found[0])
