"""pack-quantized: weights a checkpoint stores in ggml's blocks stay in them, read by kernels that widen as they go.

Why: a 4-bit GGUF weight takes an eighth of its float32 bytes.  Dequantized at load, a 135M-parameter
model's `Weights` would hold 540 MB for a 98 MB file; kept packed, it holds the file's bytes (views of
its memory map).  The products and gathers that read such a weight then widen its blocks themselves
(`loam/runtime/kernels/quantized.py`), a bounded group of rows at a time.

Input: kernel IR whose `kernel.weight` ops carry `stored = "Q4_1"` (or `Q4_0`, `Q8_0`) where the
checkpoint stores them so, or whose module's `loam.stored_encodings` says so by weight name (`loam build`
records it from the checkpoint headers it read, so a replay of the dumped IR packs the same weights).
A 2-D weight W with rows of whole 32-element blocks is packed when every reader is one of

- `kernel.permute W [1, 0]` read only as the right operand of `kernel.matmul`s without an epilogue
  (ONNX `MatMul(x, Transpose(W))`, a linear layer), which become `kernel.matmul_packed(x, W)
  {transposed = 1}`;
- `kernel.matmul` without an epilogue reading W as its right operand (x @ W, GPT-2's Conv1D), which
  becomes `kernel.matmul_packed(x, W) {transposed = 0}`;
- `kernel.gather(W, ids) {axis = 0}` (an embedding lookup), which becomes `kernel.gather_packed`;

and then carries `packed`, which tells the numpy module's `Weights` to keep its blocks.  Where the build
sets `int8_activations` (the module's `loam.int8_activations`; off unless given, for a GGUF), each
`transposed = 1` product also gets `int8 = 1`: x is rounded to llama.cpp's q8 blocks and multiplied as
integers (`loam/runtime/kernels/int8_products.py`); x @ W runs in float32 either way, its blocks lying
across K.  A weight with
any other reader stays as it was (dequantized to float32 at load); `unpacked_reasons` says why for
the build's notes.  Both backends run this pass: the numpy module's `Weights` views the blocks in the
checkpoint's memory map, the WGSL module uploads them byte for byte and its shaders widen them.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from loam.dialects import build_contract as contract
from loam.dialects.kernel import GatherOp, GatherPackedOp, MatmulOp, MatmulPackedOp, PermuteOp, WeightOp
from loam.dialects.tensor_axes import AxesTensorType
from loam.passes.notes import add_notes

PACKED_ENCODINGS = frozenset({"Q4_0", "Q4_1", "Q8_0"})
"""The ggml block encodings the packed kernels read."""


@dataclass(frozen=True)
class PackQuantizedPass(ModulePass):
    """Keep weights stored in ggml blocks packed: products and gathers over them widen as they go."""

    name = "pack-quantized"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        stored = contract.STORED_ENCODINGS.get(op) or {}
        int8 = bool(contract.INT8_ACTIVATIONS.get(op))
        notes: list[str] = []
        for weight in [w for w in op.walk() if isinstance(w, WeightOp)]:
            name = weight.weight_name.data
            if name in stored and not contract.STORED.is_on(weight):
                contract.STORED.set(weight, stored[name][0])
            if not _in_blocks(weight):
                continue
            why = why_unpacked(weight)
            if why is None:
                _pack(weight, int8)
            elif name in stored:
                encoding, path = stored[name]
                notes.append(
                    f"checkpoint {path}: tensor '{name}' is {encoding}; {why}, "
                    "so Weights dequantizes it to float32 at load"
                )
        if int8 and any(isinstance(m, MatmulPackedOp) and m.params.get("int8") for m in op.walk()):
            notes.append(
                "int8_activations: products over the checkpoint's packed blocks round x to int8 per block of 32 "
                "(q8_0, q8_1 for Q4_1) and multiply integers, as llama.cpp does (a WGSL module's shaders multiply "
                "in float32)"
            )
        if notes:
            add_notes(op, notes)


def _in_blocks(weight: WeightOp) -> bool:
    """Whether the checkpoint stores `weight` in ggml blocks (and the graph does not carry it)."""
    return contract.STORED.get(weight) in PACKED_ENCODINGS and weight.data is None


def why_unpacked(weight: WeightOp) -> str | None:
    """Why `weight`, stored in blocks, cannot stay packed (None: it can, or it is not stored in blocks)."""
    if not _in_blocks(weight):
        return None
    t = weight.result.type
    if not isinstance(t, AxesTensorType) or t.rank != 2 or not all(e.is_const for e in t.shape):
        return "it is not a matrix of fixed extents"
    if t.shape[1].const_value % 32:
        return f"its rows of {t.shape[1].const_value} elements are not whole blocks of 32"
    for use in weight.result.uses:
        user = use.operation
        if not _packable_reader(weight, user):
            node = user.properties.get("node")
            name = node.data if isinstance(node, StringAttr) else user.name
            return f"node '{name}' reads it as float32 ({user.name})"
    return None


def _packable_reader(weight: WeightOp, user: Operation) -> bool:
    """Whether `user` reads `weight` in a way a packed kernel computes (see the module docstring)."""
    if isinstance(user, GatherOp):
        return user.operands[0] is weight.result and user.param("axis") == 0
    if isinstance(user, MatmulOp):
        return user.rhs is weight.result and user.lhs is not weight.result and user.epilogue is None
    if isinstance(user, PermuteOp) and user.permutation == (1, 0):
        readers = [u.operation for u in user.result.uses]
        return bool(readers) and all(
            isinstance(m, MatmulOp) and m.rhs is user.result and m.lhs is not user.result and m.epilogue is None
            for m in readers
        )
    return False


def _pack(weight: WeightOp, int8: bool) -> None:
    rewriter = Rewriter()
    for use in list(weight.result.uses):
        user = use.operation
        if user.parent is None:  # already rewritten through another use
            continue
        if isinstance(user, GatherOp):
            new = GatherPackedOp([weight.result, user.operands[1]], [user.results[0].type], user.node.data, axis=0)
            rewriter.replace_op(user, new)
            continue
        if isinstance(user, MatmulOp):
            node = user.properties["node"]
            assert isinstance(node, StringAttr)
            packed = MatmulPackedOp([user.lhs, weight.result], [user.result.type], node.data, transposed=0)
            rewriter.replace_op(user, packed)
            continue
        assert isinstance(user, PermuteOp)
        for m in [u.operation for u in user.result.uses]:
            assert isinstance(m, MatmulOp)
            node = m.properties["node"]
            assert isinstance(node, StringAttr)
            params = {"transposed": 1, **({"int8": 1} if int8 else {})}
            packed = MatmulPackedOp([m.lhs, weight.result], [m.result.type], node.data, **params)
            rewriter.replace_op(m, packed)
        rewriter.erase_op(user)
    contract.PACKED.set(weight, True)
