"""Built-in architecture tables: what `architecture = "NAME"` in the options brings to a build.

A published checkpoint is rarely keyed by the exported graph's initializer names: a GGUF calls
`model.layers.0.self_attn.q_proj.weight` `blk.0.attn_q.weight`, and GPT-2's drops the `transformer.`
prefix its export carries.  An architecture table holds, for one model family, the
`[checkpoint_names]` rules that map such a checkpoint onto the graph (consulted after the options'
own rules, so a build can override any of them).  With `architecture` set, a GGUF checkpoint's
`general.architecture` must name the same family.

A table also names the axes of the family's graph inputs and weights (its `layout`, consulted after
the options' own rules; the build drafts names for every other tensor, as `loam layout` would), so a
model of the family builds with no layout file.  A GGUF converted by llama.cpp may store tensors
otherwise than the model computes with them: `rotary_rows` lists the q/k projections whose rows its
converter interleaved, which the module puts back at load.  Tests register tables of their own by
adding to `ARCHITECTURES`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from loam.core.errors import OptionsError
from loam.core.layout import LayoutRule


@dataclass(frozen=True)
class Architecture:
    """One model family's table."""

    name: str  # as GGUF's `general.architecture` spells it
    checkpoint_names: tuple[tuple[str, str], ...] = ()  # (checkpoint glob, graph name), as in the options
    layout: tuple[LayoutRule, ...] = ()
    """Axis names of the family's graph inputs and weights, consulted after the options' own rules."""
    rotary_rows: tuple[tuple[str, str], ...] = ()
    """(checkpoint glob, GGUF metadata key of the head count): q/k projections whose rows llama.cpp's
    converter interleaved for its rotary embedding; the module puts them back at load."""

    def layout_for(self, declared: Iterable[str]) -> tuple[LayoutRule, ...]:
        """The table's rules that reach one of the `declared` tensors, for a graph with a past (the
        keys attended are `Context`: the past and the new tokens) or without one (they are `Seq`)."""
        names = set(declared)
        has_past = any(fnmatchcase(n, "past_key_values.*") for n in names)
        rules = []
        for rule in self.layout:
            if not any(rule.reaches(n) for n in names):
                continue
            axes = rule.axes if has_past else tuple("Seq" if a == "Context" else a for a in rule.axes)
            rules.append(LayoutRule(rule.pattern, axes, rule.graph))
        return tuple(rules)


def _rules(*rules: tuple[str, tuple[str, ...]]) -> tuple[LayoutRule, ...]:
    return tuple(LayoutRule(pattern, axes) for pattern, axes in rules)


# A decoder's inputs as Hugging Face's exports name them (optimum, torch.onnx of a *ForCausalLM).
_DECODER_INPUTS = _rules(
    ("input_ids", ("Batch", "Seq")),
    ("position_ids", ("Batch", "Seq")),
    ("attention_mask", ("Batch", "Context")),
    ("past_key_values.*.key", ("Batch", "KvHeads", "Past", "HeadDim")),
    ("past_key_values.*.value", ("Batch", "KvHeads", "Past", "HeadDim")),
)

LLAMA = Architecture(
    "llama",
    checkpoint_names=(
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.norm.weight"),
        ("output.weight", "lm_head.weight"),
        ("blk.*.attn_norm.weight", "model.layers.*.input_layernorm.weight"),
        ("blk.*.ffn_norm.weight", "model.layers.*.post_attention_layernorm.weight"),
        ("blk.*.attn_q.weight", "model.layers.*.self_attn.q_proj.weight"),
        ("blk.*.attn_k.weight", "model.layers.*.self_attn.k_proj.weight"),
        ("blk.*.attn_v.weight", "model.layers.*.self_attn.v_proj.weight"),
        ("blk.*.attn_output.weight", "model.layers.*.self_attn.o_proj.weight"),
        ("blk.*.ffn_gate.weight", "model.layers.*.mlp.gate_proj.weight"),
        ("blk.*.ffn_up.weight", "model.layers.*.mlp.up_proj.weight"),
        ("blk.*.ffn_down.weight", "model.layers.*.mlp.down_proj.weight"),
    ),
    layout=_DECODER_INPUTS
    + _rules(
        ("model.embed_tokens.weight", ("Vocab", "Hidden")),
        ("lm_head.weight", ("Vocab", "Hidden")),
        ("model.norm.weight", ("Hidden",)),
        ("model.layers.*.input_layernorm.weight", ("Hidden",)),
        ("model.layers.*.post_attention_layernorm.weight", ("Hidden",)),
        ("model.layers.*.self_attn.q_proj.weight", ("Query", "Hidden")),
        ("model.layers.*.self_attn.k_proj.weight", ("(KvHeads HeadDim)", "Hidden")),
        ("model.layers.*.self_attn.v_proj.weight", ("(KvHeads HeadDim)", "Hidden")),
        ("model.layers.*.mlp.gate_proj.weight", ("Ffn", "Hidden")),
        # Grouped-query attention repeats each key/value head for its Group of query heads.
        ("/model/layers.*/self_attn/Expand_output_0", ("Batch", "KvHeads", "Group", "Context", "HeadDim")),
        ("/model/layers.*/self_attn/Expand_1_output_0", ("Batch", "KvHeads", "Group", "Context", "HeadDim")),
        ("model.layers.*.mlp.up_proj.weight", ("Ffn", "Hidden")),
        ("model.layers.*.mlp.down_proj.weight", ("Hidden", "Ffn")),
    ),
    rotary_rows=(
        ("blk.*.attn_q.weight", "llama.attention.head_count"),
        ("blk.*.attn_k.weight", "llama.attention.head_count_kv"),
    ),
)

GPT2 = Architecture(
    "gpt2",
    # Hugging Face's own GPT-2 checkpoints drop the `transformer.` prefix the export carries.  (A GGUF of
    # GPT-2 stores its Conv1D matrices transposed, [out, in], which this table does not undo.)
    checkpoint_names=(
        ("wte.weight", "transformer.wte.weight"),
        ("wpe.weight", "transformer.wpe.weight"),
        ("ln_f.*", "transformer.ln_f.*"),
        ("h.*.*.*", "transformer.h.*.*.*"),
        ("h.*.*.*.*", "transformer.h.*.*.*.*"),
    ),
    layout=_DECODER_INPUTS
    + _rules(
        ("past_key_values.*.key", ("Batch", "Heads", "Past", "HeadDim")),
        ("past_key_values.*.value", ("Batch", "Heads", "Past", "HeadDim")),
        ("transformer.wte.weight", ("Vocab", "Hidden")),
        ("transformer.wpe.weight", ("Positions", "Hidden")),
        ("lm_head.weight", ("Vocab", "Hidden")),
        ("lm_head.weight.T", ("Hidden", "Vocab")),  # the tied head, as torch's exporter folds its transpose
        ("transformer.ln_f.*", ("Hidden",)),
        ("transformer.h.*.ln_*", ("Hidden",)),
        ("transformer.h.*.attn.c_attn.weight", ("Hidden", "Qkv")),
        ("transformer.h.*.attn.c_attn.bias", ("Qkv",)),
        ("transformer.h.*.attn.c_proj.weight", ("Hidden", "Hidden")),
        ("transformer.h.*.attn.c_proj.bias", ("Hidden",)),
        ("transformer.h.*.mlp.c_fc.weight", ("Hidden", "Ffn")),
        ("transformer.h.*.mlp.c_fc.bias", ("Ffn",)),
        ("transformer.h.*.mlp.c_proj.weight", ("Ffn", "Hidden")),
        ("transformer.h.*.mlp.c_proj.bias", ("Hidden",)),
    ),
)

BERT = Architecture(
    "bert",
    # A BertModel's own checkpoint is keyed as torch's export names the graph; one saved from a model
    # with a head (BertForMaskedLM, the published pretraining checkpoints) carries a `bert.` prefix.
    # llama.cpp's GGUF names map one-to-one onto the parameters, none transposed (it has no name for the
    # pooler).  torch's export with constant folding on reads the Linear weights as folded transposes
    # (`<parameter>.T` once renamed), which neither kind of checkpoint holds and this table cannot undo.
    checkpoint_names=(
        ("bert.embeddings.*.*", "embeddings.*.*"),
        ("bert.encoder.layer.*.*.*.*", "encoder.layer.*.*.*.*"),
        ("bert.encoder.layer.*.*.*.*.*", "encoder.layer.*.*.*.*.*"),
        ("bert.pooler.dense.*", "pooler.dense.*"),
        ("token_embd.weight", "embeddings.word_embeddings.weight"),
        ("position_embd.weight", "embeddings.position_embeddings.weight"),
        ("token_types.weight", "embeddings.token_type_embeddings.weight"),
        ("token_embd_norm.*", "embeddings.LayerNorm.*"),
        ("blk.*.attn_q.*", "encoder.layer.*.attention.self.query.*"),
        ("blk.*.attn_k.*", "encoder.layer.*.attention.self.key.*"),
        ("blk.*.attn_v.*", "encoder.layer.*.attention.self.value.*"),
        ("blk.*.attn_output.*", "encoder.layer.*.attention.output.dense.*"),
        ("blk.*.attn_output_norm.*", "encoder.layer.*.attention.output.LayerNorm.*"),
        ("blk.*.ffn_up.*", "encoder.layer.*.intermediate.dense.*"),
        ("blk.*.ffn_down.*", "encoder.layer.*.output.dense.*"),
        ("blk.*.layer_output_norm.*", "encoder.layer.*.output.LayerNorm.*"),
    ),
    layout=_rules(
        ("input_ids", ("Batch", "Seq")),
        ("attention_mask", ("Batch", "Seq")),
        ("token_type_ids", ("Batch", "Seq")),
        ("embeddings.word_embeddings.weight", ("Vocab", "Hidden")),
        ("embeddings.position_embeddings.weight", ("Positions", "Hidden")),
        ("embeddings.token_type_embeddings.weight", ("TokenTypes", "Hidden")),
        ("embeddings.LayerNorm.*", ("Hidden",)),
        ("encoder.layer.*.attention.self.*.weight", ("(Heads HeadDim)", "Hidden")),
        ("encoder.layer.*.attention.self.*.weight.T", ("Hidden", "(Heads HeadDim)")),
        ("encoder.layer.*.attention.self.*.bias", ("(Heads HeadDim)",)),
        ("encoder.layer.*.attention.output.dense.weight", ("Hidden", "(Heads HeadDim)")),
        ("encoder.layer.*.attention.output.dense.weight.T", ("(Heads HeadDim)", "Hidden")),
        ("encoder.layer.*.attention.output.dense.bias", ("Hidden",)),
        ("encoder.layer.*.*.LayerNorm.*", ("Hidden",)),
        ("encoder.layer.*.intermediate.dense.weight", ("Ffn", "Hidden")),
        ("encoder.layer.*.intermediate.dense.weight.T", ("Hidden", "Ffn")),
        ("encoder.layer.*.intermediate.dense.bias", ("Ffn",)),
        ("encoder.layer.*.output.dense.weight", ("Hidden", "Ffn")),
        ("encoder.layer.*.output.dense.weight.T", ("Ffn", "Hidden")),
        ("encoder.layer.*.output.dense.bias", ("Hidden",)),
        ("pooler.dense.weight", ("Hidden", "Hidden")),
        ("pooler.dense.bias", ("Hidden",)),
    ),
)

ARCHITECTURES: dict[str, Architecture] = {table.name: table for table in (LLAMA, GPT2, BERT)}


def architecture(name: str) -> Architecture:
    """The table of `name`; OptionsError listing the known ones when there is none."""
    if name in ARCHITECTURES:
        return ARCHITECTURES[name]
    if not ARCHITECTURES:
        # Refused rather than ignored: a build that silently skipped the table would name no axis.
        raise OptionsError(
            f"architecture '{name}': Loam ships no built-in architecture tables yet; name the axes with layout rules"
        )
    raise OptionsError(f"architecture '{name}': no such table (known: {', '.join(sorted(ARCHITECTURES))})")
