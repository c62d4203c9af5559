"""Known-token stages: the `sequence` role, an encoder over supplied ids that publishes what its package declares.

A sequence stage consumes only the ids a request supplies and samples nothing: there is no decode loop,
no token fed back, no chat contract.  Each request is finite, so the role runs on the finite machinery
(`loam.serve.finite`: prepared bytes, cohorts of equal tags up to `batch_units`, a result plan mapping
physical output back to requests), and its stage's `publish` key says what each request receives:

- `score`: a cross-encoder's relevance of a pair (query, document).  The package's tokenizer frames the
  pair with its pair template (a BERT tokenizer's `[CLS] query [SEP] document [SEP]`, token types 0 then
  1), the stage's one output is [batch, 1] (the head's logit, through the stage's `activation`, which
  `loam.serve.activation` appends to the graph: `sigmoid`, or `none`, as sentence-transformers'
  `CrossEncoder` offers), and the request's score is its row's one value.
- `rows`: the encoder's hidden rows [length, hidden] for the request's ids (text or ids, as an embedding
  request gives them), the stage's one output being [batch, sequence, hidden]; the plan maps the first
  `length` rows of the request's physical row, never its padding.

Nothing is retained between requests, on purpose: an encoder's attention is bidirectional, so every
hidden row of a prefix depends on every token after it, and appending a document to a query changes the
query's rows too.  Unlike a decoder's causal KV state, no prefix of an encoder's activations is reusable
by a request whose later tokens differ.  What a request shares with its peers is the cohort (one run of
the stage over the padded batch), and what the server keeps is the built stage and its weights.

The prepared bytes of a request are its ids then its token types, both int32 little-endian; `units` is its
token count, so `batch_units` bounds a cohort's tokens as for embeddings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from loam.serve.finite import (
    Batch,
    EmbeddingControl,
    EmbeddingInput,
    EmbeddingState,
    FiniteControl,
    FiniteRequest,
    FiniteWorker,
    Prepared,
    RowSpan,
)
from loam.serve.metrics import ModelMetrics
from loam.serve.pooling import read_onnx
from loam.serve.scheduler import ServeError
from loam.serve.spec import Control, Package, PackageError, refuse_control


@dataclass(frozen=True)
class PairInput(EmbeddingInput):
    """One pair to score: `text` is the query, `pair` the document; `param` names the request field at fault."""

    pair: str = ""


@runtime_checkable
class PairTokenizer(Protocol):
    """A tokenizer that frames a pair with its pair template (`loam.text.tokenizer.Tokenizer.encode_pair`)."""

    def encode_pair(self, text: str, pair: str) -> tuple[list[int], list[int]]: ...


@dataclass(frozen=True)
class SequenceState(EmbeddingState):
    """`EmbeddingState`, with what the stage publishes and, for rows, each row's width (the hidden extent)."""

    publish: str = "score"
    width: int = 1


class SequenceControl(EmbeddingControl):
    """The sequence role's control: a BERT-like encoder taking input_ids, attention_mask and optionally
    token_type_ids, whose one output is a score per pair or the hidden rows of every id."""

    def prepare(self, package: Package) -> SequenceState:
        where = package.spec.folder / "model.json"
        if len(package.stages) != 1:
            raise PackageError(f"{where}: key 'stages': a sequence package has one stage, not {len(package.stages)}")
        stage = next(iter(package.stages.values()))
        key = f"stages.{stage.spec.name}"
        publish = stage.spec.publish
        if publish is None:
            raise PackageError(f"{where}: key '{key}.publish' is missing: a sequence stage publishes score or rows")
        base = super().prepare(package)
        # The stage's output as the graph declares it (`output` and an activation keep the output's name).
        declared = {o.name: o for o in read_onnx(stage.spec.graph).graph.output}
        chosen = stage.outputs[0] if stage.outputs else stage.spec.output or next(iter(declared))
        if chosen not in declared:
            raise PackageError(f"{where}: key '{key}.output' names {chosen!r}, which is not one of the graph's outputs")
        dims = declared[chosen].type.tensor_type.shape.dim
        last = dims[-1].dim_value if dims and dims[-1].HasField("dim_value") else None
        if publish == "score":
            if len(dims) != 2 or last != 1:
                raise PackageError(
                    f"{where}: key '{key}.publish' is score: output {chosen!r} must be [batch, 1] (one logit)"
                )
            if not isinstance(package.tokenizer, PairTokenizer):
                raise PackageError(f"{where}: key 'tokenizer': a score frames text pairs; give a tokenizer.json")
        elif len(dims) != 3 or last is None:
            raise PackageError(
                f"{where}: key '{key}.publish' is rows: output {chosen!r} must be [batch, sequence, hidden], "
                "hidden a fixed extent"
            )
        return SequenceState(**vars(base), publish=publish, width=last)

    def prepare_request(self, state: object, item: EmbeddingInput) -> Prepared:
        assert isinstance(state, SequenceState)
        if state.publish != "score":
            plain = super().prepare_request(state, item)
            count = plain.units
            return Prepared(plain.data + bytes(4 * count), count, plain.tag)  # token types 0
        if not isinstance(item, PairInput):
            raise ServeError(f"{item.param}: this model scores pairs (query, document)", param=item.param)
        assert isinstance(state.tokenizer, PairTokenizer)  # prepare refused a package without one
        ids, types = state.tokenizer.encode_pair(item.text or "", item.pair)
        if len(ids) > state.context:
            raise ServeError(
                f"{item.param}: the pair is {len(ids)} tokens; this model takes at most {state.context} "
                "(context_tokens)",
                param=item.param,
            )
        return Prepared(np.asarray([*ids, *types], dtype="<i4").tobytes(), len(ids), "")

    def prepare_batch(self, state: object, ranges: Sequence[tuple[int, int]], data: bytes) -> Batch:
        assert isinstance(state, SequenceState)
        ids, types = [], []
        for both in self.pack(state, ranges, data):
            count = len(both) // 2
            ids.append(both[:count])
            types.append(both[count:])
        return self.batch(state, ids, list(range(len(ids))), types)

    def spans(self, state: EmbeddingState, row: int, length: int) -> tuple[RowSpan, ...]:
        """A score is its row's one value; rows are the first `length` of the row's [sequence, hidden]."""
        assert isinstance(state, SequenceState)
        return (RowSpan(row, 0, -1),) if state.publish == "score" else (RowSpan(row, 0, length * state.width),)


class SequenceWorker(FiniteWorker):
    """The finite worker of a sequence package: its cohorts are the embedding role's, and a score's pairs are
    counted (`loam_scored_pairs_total`)."""

    def _collect(self, cohort: Sequence[FiniteRequest], results: list[np.ndarray]) -> None:
        state = self.state
        if isinstance(state, SequenceState) and state.publish == "score":
            self.metrics.scored(len(cohort))
        super()._collect(cohort, results)


def serve_sequence(package: Package, control: Control, metrics: ModelMetrics) -> SequenceWorker:
    """The sequence role's worker for `package`, once its control is seen to provide the finite contract."""
    if not isinstance(control, FiniteControl):
        raise refuse_control(package, FiniteControl)
    return SequenceWorker(package, control, package.spec.capacities, metrics)
