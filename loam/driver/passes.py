"""Every pass Loam's pipeline and `loam-opt` know by name, registered lazily (the xDSL `get_all_passes`
pattern).  The registry sits in the driver because one pass, `draft-layout`, is the driver's layout
drafter run inside the pipeline; the others are `loam.passes`'."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Each Loam pass's name and a zero-argument function that imports and returns its class."""

    def get_apply_options() -> type[ModulePass]:
        from loam.passes.apply_options import ApplyOptionsPass

        return ApplyOptionsPass

    def get_stage0() -> type[ModulePass]:
        from loam.passes.stage0 import Stage0Pass

        return Stage0Pass

    def get_draft_layout() -> type[ModulePass]:
        from loam.driver.draft_layout import DraftLayoutPass

        return DraftLayoutPass

    def get_name_axes() -> type[ModulePass]:
        from loam.passes.name_axes import NameAxesPass

        return NameAxesPass

    def get_lower_to_kernel() -> type[ModulePass]:
        from loam.passes.lower_to_kernel import LowerToKernelPass

        return LowerToKernelPass

    def get_differentiate() -> type[ModulePass]:
        from loam.passes.differentiate import DifferentiatePass

        return DifferentiatePass

    def get_split_wide_weights() -> type[ModulePass]:
        from loam.passes.split_wide_weights import SplitWideWeightsPass

        return SplitWideWeightsPass

    def get_fuse() -> type[ModulePass]:
        from loam.passes.fuse import FusePass

        return FusePass

    def get_pack_quantized() -> type[ModulePass]:
        from loam.passes.pack_quantized import PackQuantizedPass

        return PackQuantizedPass

    def get_fold_conv_affine() -> type[ModulePass]:
        from loam.passes.fold_conv_affine import FoldConvAffinePass

        return FoldConvAffinePass

    def get_decode_state_in_place() -> type[ModulePass]:
        from loam.passes.decode_state_in_place import DecodeStateInPlacePass

        return DecodeStateInPlacePass

    def get_fuse_attention() -> type[ModulePass]:
        from loam.passes.fuse_attention import FuseAttentionPass

        return FuseAttentionPass

    def get_grouped_heads() -> type[ModulePass]:
        from loam.passes.grouped_heads import GroupedHeadsPass

        return GroupedHeadsPass

    def get_tile_attention() -> type[ModulePass]:
        from loam.passes.tile_attention import TileAttentionPass

        return TileAttentionPass

    def get_tile_rows() -> type[ModulePass]:
        from loam.passes.tile_rows import TileRowsPass

        return TileRowsPass

    def get_tile_matmul() -> type[ModulePass]:
        from loam.passes.tile_matmul import TileMatmulPass

        return TileMatmulPass

    return {
        "apply-options": get_apply_options,
        "stage0": get_stage0,
        "draft-layout": get_draft_layout,
        "name-axes": get_name_axes,
        "lower-to-kernel": get_lower_to_kernel,
        "differentiate": get_differentiate,
        "fuse": get_fuse,
        "pack-quantized": get_pack_quantized,
        "split-wide-weights": get_split_wide_weights,
        "fold-conv-affine": get_fold_conv_affine,
        "decode-state-in-place": get_decode_state_in_place,
        "fuse-attention": get_fuse_attention,
        "grouped-heads": get_grouped_heads,
        "tile-attention": get_tile_attention,
        "tile-rows": get_tile_rows,
        "tile-matmul": get_tile_matmul,
    }
