"""Write the tiny random BERT cross-encoder serving package (dev-time only; its output is committed).

Why: the `sequence` role's `score` publishes a cross-encoder's relevance of a (query, document) pair, as
sentence-transformers' `CrossEncoder` computes it: the pair framed by the tokenizer as
`[CLS] query [SEP] document [SEP]` with token_type_ids 0 then 1, one logit from the classifier head, then
an optional sigmoid.  No package on the registries carries a real cross-encoder's weights in a form the
tests can install, so this writes a small one with random weights: what the tests hold Loam to is
onnxruntime on the same graph, and random weights make every node matter.

- the tokenizer: a lower-casing BERT WordPiece whose vocabulary is the Zen of Python's words and characters,
  with BERT's pair template (`[CLS] $A [SEP] $B:1 [SEP]:1`), so text in the tests is real text;
- the model: `transformers.BertForSequenceClassification` (2 layers, 4 heads, hidden 64, intermediate 128,
  128 positions, 2 token types, `num_labels=1`), `torch.manual_seed(0)`, initializer range 0.2 and every
  LayerNorm and bias redrawn (BERT inits them to ones and zeros, which would hide a dropped bias);
- the graph: `torch.onnx.export(..., dynamo=False)`, opset 17, dynamic batch and sequence, inputs
  input_ids, attention_mask, token_type_ids (int64) -> `logits` [batch, 1], its weights ONNX external data
  in `model.onnx.data` beside it, named as a `BertModel`'s (the `bert.` prefix dropped, which Loam's `bert`
  architecture would otherwise map away) and the head's `classifier.weight` and `classifier.bias`.  The
  script checks onnxruntime's logits against torch's.

Needs torch and transformers, which are not project dependencies; CI never runs this script:

    /work/vision-venv/bin/python scripts/export_tiny_cross_encoder.py   # torch 2.13, transformers 4.46.3

It writes tests/serve/packages/tiny_cross_encoder/{model.onnx, model.onnx.data, tokenizer.json}; the
package's `model.json` beside them is written by hand.
"""

from __future__ import annotations

import codecs
import this  # prints the Zen on import; its text is this.s, rot13
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, BertForSequenceClassification

OUT = Path(__file__).resolve().parent.parent / "tests" / "serve" / "packages" / "tiny_cross_encoder"
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
INIT_RANGE = 0.2


def tokenizer() -> Tokenizer:
    """BERT's WordPiece over a vocabulary made, not trained (the trainer's order varies run to run): the special
    tokens, every character of the corpus alone and as a `##` continuation, then its words, each list sorted."""
    corpus = codecs.decode(this.s, "rot13").lower()
    split = pre_tokenizers.BertPreTokenizer()
    words = sorted({word for line in corpus.splitlines() for word, _ in split.pre_tokenize_str(line)})
    chars = sorted({c for word in words for c in word})
    tokens = [*SPECIAL, *chars, *(f"##{c}" for c in chars), *(w for w in words if len(w) > 1)]
    made = Tokenizer(models.WordPiece({t: i for i, t in enumerate(dict.fromkeys(tokens))}, unk_token="[UNK]"))
    made.normalizer = normalizers.BertNormalizer(lowercase=True)
    made.pre_tokenizer = split
    made.decoder = decoders.WordPiece()
    cls, sep = made.token_to_id("[CLS]"), made.token_to_id("[SEP]")
    made.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return made


def model(vocab: int) -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=128, type_vocab_size=2, num_labels=1, initializer_range=INIT_RANGE,
        attn_implementation="eager",
    )  # fmt: skip
    made = BertForSequenceClassification(config).eval()
    with torch.no_grad():
        for name, param in made.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                param.copy_(torch.randn_like(param) * INIT_RANGE + (1.0 if name.endswith("LayerNorm.weight") else 0.0))
    return made


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    tok = tokenizer()
    tok.save(str(OUT / "tokenizer.json"), pretty=False)
    net = model(tok.get_vocab_size(with_added_tokens=True))
    pairs = [("Errors should never pass silently.", "Unless explicitly silenced."),
             ("Simple is better", "than complex and complicated things")]  # fmt: skip
    encoded = [tok.encode(q, d) for q, d in pairs]
    longest = max(len(e.ids) for e in encoded)
    feeds = {
        name: np.zeros((len(pairs), longest), np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")
    }
    for row, e in enumerate(encoded):
        feeds["input_ids"][row, : len(e.ids)] = e.ids
        feeds["attention_mask"][row, : len(e.ids)] = 1
        feeds["token_type_ids"][row, : len(e.ids)] = e.type_ids
    args = tuple(torch.from_numpy(feeds[n]) for n in ("input_ids", "attention_mask", "token_type_ids"))
    graph = OUT / "model.onnx"
    torch.onnx.export(
        net, args, str(graph), input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["logits"], opset_version=17, dynamo=False, do_constant_folding=True,
        dynamic_axes={**{n: {0: "batch_size", 1: "sequence_length"} for n in ("input_ids", "attention_mask",
                                                                                "token_type_ids")},
                      "logits": {0: "batch_size"}},
    )  # fmt: skip
    proto = onnx.load(str(graph))
    # The classifier's encoder is `bert.`-prefixed; Loam's `bert` architecture reads a `bert.` checkpoint name
    # as the bare BertModel's, so the graph names its parameters as a BertModel does (the head's stay).
    for init in proto.graph.initializer:
        init.name = init.name.removeprefix("bert.")
    for node in proto.graph.node:
        node.input[:] = [name.removeprefix("bert.") for name in node.input]
    onnx.save(proto, str(graph), save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=0)  # fmt: skip
    with torch.no_grad():
        want = net(*args).logits.numpy()
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    (got,) = session.run(["logits"], feeds)
    np.testing.assert_allclose(got, want, atol=1e-5)
    print(f"vocabulary {tok.get_vocab_size()} ids; logits {got.ravel()}; wrote {OUT}")


if __name__ == "__main__":
    main()
