"""The sequence role against a real server on 127.0.0.1: a cross-encoder's `/v1/score` and `/v1/rerank`, an
encoder's rows on `/pooling`, errors naming the field, the scored-pairs metric, and packages refused by key.

The cross-encoder is the random-weight BERT of tests/serve/packages/tiny_cross_encoder
(scripts/export_tiny_cross_encoder.py).  Oracles: onnxruntime on the package's own graph, one pair at a time
(no padding), the pair framed by the `tokenizers` library from the package's tokenizer.json and the sigmoid
taken in numpy; for rows, onnxruntime's last_hidden_state of the tiny BERT, one input at a time.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import numpy as np
import onnx
import onnx.checker
import onnxruntime as ort
import pytest
import tokenizers
from onnx import TensorProto, helper, numpy_helper, parser
from onnx.external_data_helper import load_external_data_for_model

from loam.core.errors import LoamError
from loam.serve.activation import activated_model
from loam.serve.finite import FiniteWorker, embed
from loam.serve.sequence import PairInput
from loam.serve.server import Server
from tests.serve.serving import MODELS, PACKAGES, http_client, package_copy, serving

pytestmark = pytest.mark.xdist_group("serve-score")
SCORER = "tiny-cross-encoder"
ROWS = "tiny-bert-rows"
CROSS = PACKAGES / "tiny_cross_encoder"
QUERY = "Errors should never pass silently."
DOCUMENTS = [
    "Unless explicitly silenced.",
    "Beautiful is better than ugly.",
    "In the face of ambiguity, refuse the temptation to guess.",
    "Now is better than never.",
    "Although never is often better than right now.",
    "Namespaces are one honking great idea -- let's do more of those!",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory, CROSS, PACKAGES / "tiny_bert_rows") as server:
        yield server


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with http_client(server, timeout=120) as client:
        yield client


def logits(pairs: Sequence[tuple[str, str]]) -> np.ndarray:
    """onnxruntime's logit of each pair, run alone, framed by the package's tokenizer.json."""
    tokenizer = tokenizers.Tokenizer.from_file(str(CROSS / "tokenizer.json"))
    session = ort.InferenceSession(str(CROSS / "model.onnx"), providers=["CPUExecutionProvider"])
    out = []
    for query, document in pairs:
        encoded = tokenizer.encode(query, document)
        feeds = {"input_ids": np.array([encoded.ids], np.int64), "attention_mask": np.ones((1, len(encoded.ids)),
                 np.int64), "token_type_ids": np.array([encoded.type_ids], np.int64)}  # fmt: skip
        (logit,) = session.run(["logits"], feeds)
        out.append(float(logit.reshape(-1)[0]))
    return np.array(out, np.float64)


def oracle(pairs: Sequence[tuple[str, str]]) -> np.ndarray:
    """The cross-encoder's scores: the sigmoid of onnxruntime's logits."""
    return 1.0 / (1.0 + np.exp(-logits(pairs)))


def scores(reply: httpx.Response) -> np.ndarray:
    assert reply.status_code == 200, reply.text
    data = reply.json()
    assert data["object"] == "list" and data["model"] == SCORER and data["id"].startswith("score-")
    assert [d["index"] for d in data["data"]] == list(range(len(data["data"])))
    assert all(d["object"] == "score" for d in data["data"])
    return np.array([d["score"] for d in data["data"]])


def test_scores_equal_onnxruntimes_for_one_to_one_one_to_many_and_many_to_many(http: httpx.Client) -> None:
    one = http.post("/v1/score", json={"model": SCORER, "text_1": QUERY, "text_2": DOCUMENTS[0]})
    np.testing.assert_allclose(scores(one), oracle([(QUERY, DOCUMENTS[0])]), atol=1e-6)
    assert one.json()["usage"]["prompt_tokens"] == len(
        tokenizers.Tokenizer.from_file(str(CROSS / "tokenizer.json")).encode(QUERY, DOCUMENTS[0]).ids
    )
    many = http.post("/score", json={"model": SCORER, "text_1": [QUERY], "text_2": DOCUMENTS})
    np.testing.assert_allclose(scores(many), oracle([(QUERY, d) for d in DOCUMENTS]), atol=1e-6)
    queries = list(reversed(DOCUMENTS))
    pairwise = http.post("/v1/score", json={"model": SCORER, "text_1": queries, "text_2": DOCUMENTS})
    np.testing.assert_allclose(scores(pairwise), oracle(list(zip(queries, DOCUMENTS, strict=True))), atol=1e-6)
    assert np.ptp(scores(many)) > 0.05  # the pairs really score apart, so the comparisons above can fail


def test_rerank_orders_the_documents_as_onnxruntimes_scores_sort_them(http: httpx.Client) -> None:
    want = oracle([(QUERY, d) for d in DOCUMENTS])
    order = sorted(range(len(DOCUMENTS)), key=lambda i: -want[i])
    assert all(abs(want[a] - want[b]) > 1e-4 for a, b in itertools.pairwise(order))  # no near ties
    for path in ("/v1/rerank", "/rerank", "/v2/rerank"):
        reply = http.post(path, json={"model": SCORER, "query": QUERY, "documents": DOCUMENTS})
        assert reply.status_code == 200, reply.text
        data = reply.json()
        assert data["model"] == SCORER and data["id"].startswith("rerank-") and data["usage"]["total_tokens"] > 0
        assert [r["index"] for r in data["results"]] == order
        assert [r["document"]["text"] for r in data["results"]] == [DOCUMENTS[i] for i in order]
        np.testing.assert_allclose([r["relevance_score"] for r in data["results"]], want[order], atol=1e-6)
    top = http.post("/v1/rerank", json={"model": SCORER, "query": QUERY, "documents": DOCUMENTS, "top_n": 2,
                                        "return_documents": False}).json()  # fmt: skip
    assert [r["index"] for r in top["results"]] == order[:2] and all("document" not in r for r in top["results"])


def test_a_pair_alone_and_inside_a_cohort_scores_the_same(server: Server) -> None:
    served = server.models[SCORER]
    worker = served.worker
    assert isinstance(worker, FiniteWorker)
    pairs = [PairInput(text=QUERY, pair=d) for d in DOCUMENTS]
    alone = np.array([embed(worker, [pair])[0][0] for pair in pairs])
    # One cohort of every pair, padded to the longest, as the control batches and the stage runs it.
    prepared = [worker.control.prepare_request(worker.state, pair) for pair in pairs]
    ranges, offset = [], 0
    for p in prepared:
        ranges.append((offset, len(p.data)))
        offset += len(p.data)
    batch = worker.control.prepare_batch(worker.state, ranges, b"".join(p.data for p in prepared))
    assert batch.inputs[0].shape == (len(pairs), max(p.units for p in prepared))
    output = np.asarray(served.package.stages[batch.stage].forward(*batch.inputs)[batch.plan.output])
    together = np.array([output[spans[0].row].reshape(-1)[0] for spans in batch.plan.rows])
    np.testing.assert_allclose(together, alone, atol=1e-6)
    np.testing.assert_allclose(alone, oracle([(QUERY, d) for d in DOCUMENTS]), atol=1e-6)


def test_concurrent_clients_get_their_own_scores_beside_a_bad_one(http: httpx.Client) -> None:
    groups = [DOCUMENTS[:k] for k in (1, 3, 6, 2)]
    want = [oracle([(QUERY, d) for d in g]) for g in groups]
    replies: dict[int, httpx.Response] = {}

    def client(i: int) -> None:
        body = {"model": SCORER, "text_1": QUERY, "text_2": groups[i]} if i < len(groups) else {
            "model": SCORER, "text_1": QUERY, "text_2": ["fine", "beautiful " * 200]}  # fmt: skip
        replies[i] = http.post("/v1/score", json=body)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(groups) + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for i, expected in enumerate(want):
        np.testing.assert_allclose(scores(replies[i]), expected, atol=1e-6)
    bad = replies[len(groups)]
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "text_2[1]", bad.text


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/score", {"text_1": "a", "text_2": "b"}, "model"),
        ("/v1/score", {"model": SCORER, "text_2": "b"}, "text_1"),
        ("/v1/score", {"model": SCORER, "text_1": 3, "text_2": "b"}, "text_1"),
        ("/v1/score", {"model": SCORER, "text_1": "a", "text_2": []}, "text_2"),
        ("/v1/score", {"model": SCORER, "text_1": "a", "text_2": ["b", None]}, "text_2[1]"),
        ("/v1/score", {"model": SCORER, "text_1": ["a", "b"], "text_2": ["c", "d", "e"]}, "text_2"),
        ("/v1/score", {"model": SCORER, "text_1": "a", "text_2": "word " * 200}, "text_2"),
        ("/v1/score", {"model": ROWS, "text_1": "a", "text_2": "b"}, "model"),
        ("/v1/rerank", {"model": SCORER, "documents": ["a"]}, "query"),
        ("/v1/rerank", {"model": SCORER, "query": "q", "documents": []}, "documents"),
        ("/v1/rerank", {"model": SCORER, "query": "q", "documents": "a"}, "documents"),
        ("/v1/rerank", {"model": SCORER, "query": "q", "documents": ["a", 1]}, "documents[1]"),
        ("/v1/rerank", {"model": SCORER, "query": "q", "documents": ["a"], "top_n": -1}, "top_n"),
        ("/v1/rerank", {"model": SCORER, "query": "q", "documents": ["a"], "return_documents": "no"},
         "return_documents"),
        ("/rerank", {"model": "nope", "query": "q", "documents": ["a"]}, "model"),
        ("/pooling", {"model": SCORER, "input": "a"}, "model"),
        ("/pooling", {"model": ROWS, "input": [[1, 2], [3, -4]]}, "input[1]"),
    ],
)  # fmt: skip
def test_bad_requests_are_a_4xx_naming_the_field(http: httpx.Client, path: str, body: dict, param: str) -> None:
    reply = http.post(path, json=body)
    assert 400 <= reply.status_code < 500, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and error["type"] in ("invalid_request_error", "model_not_found"), error


def scored_pairs(http: httpx.Client) -> float:
    text = http.get("/metrics").text
    found = re.search(rf'^loam_scored_pairs_total{{model="{SCORER}"}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_metrics_count_the_scored_pairs(http: httpx.Client) -> None:
    before = scored_pairs(http)
    assert http.post("/v1/score", json={"model": SCORER, "text_1": QUERY, "text_2": DOCUMENTS[:3]}).status_code == 200
    assert http.post("/v1/rerank", json={"model": SCORER, "query": QUERY, "documents": DOCUMENTS}).status_code == 200
    assert scored_pairs(http) == before + 3 + len(DOCUMENTS)


def tiny_bert_hidden(ids: Sequence[int]) -> np.ndarray:
    """onnxruntime's last_hidden_state of the tiny BERT for `ids` alone."""
    proto = parser.parse_model((MODELS / "tiny_bert" / "encoder_unfolded.onnxtext").read_text(encoding="utf-8"))
    load_external_data_for_model(proto, str(MODELS / "tiny_bert"))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, len(ids)), np.int64),
             "token_type_ids": np.zeros((1, len(ids)), np.int64)}  # fmt: skip
    return session.run(["last_hidden_state"], feeds)[0][0]


def test_rows_are_the_encoders_hidden_rows_of_each_supplied_id(http: httpx.Client) -> None:
    inputs = [[5, 9, 200, 31, 7], [42], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]]
    reply = http.post("/pooling", json={"model": ROWS, "input": inputs})
    assert reply.status_code == 200, reply.text
    data = reply.json()
    assert data["object"] == "list" and data["usage"]["prompt_tokens"] == sum(map(len, inputs))
    for item, ids in zip(data["data"], inputs, strict=True):
        rows = np.array(item["data"])
        assert item["object"] == "pooling" and rows.shape == (len(ids), 64)  # the padding is no one's row
        np.testing.assert_allclose(rows, tiny_bert_hidden(ids), atol=2e-5)


def cross_stage(**keys: object) -> dict[str, object]:
    return {"encoder": {"graph": str(CROSS / "model.onnx"), "options": {"architecture": "bert"}, **keys}}


@pytest.mark.parametrize(
    ("keys", "words"),
    [
        ({"publish": "logits"}, "key 'stages.encoder.publish' must be one of score, rows, got 'logits'"),
        ({}, "key 'stages.encoder.publish' is missing"),
        ({"publish": "score", "activation": "softmax"}, "key 'stages.encoder.activation' must be one of sigmoid, none"),
        ({"publish": "rows", "activation": "sigmoid"}, "key 'stages.encoder.activation' applies to a score"),
        ({"publish": "rows"}, "'stages.encoder.publish' is rows: output 'logits' must be [batch, sequence, hidden]"),
        ({"publish": "score", "tokenizer": None}, "key 'tokenizer': a score frames text pairs"),
    ],
)  # fmt: skip
def test_a_package_the_role_cannot_serve_is_refused_naming_the_key(
    tmp_path_factory: pytest.TempPathFactory, keys: dict[str, object], words: str
) -> None:
    stage = {k: v for k, v in keys.items() if k != "tokenizer"}
    changes = {"tokenizer": keys["tokenizer"]} if "tokenizer" in keys else {}
    folder = package_copy(tmp_path_factory, "tiny_cross_encoder", stages=cross_stage(**stage), **changes)
    server = Server()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOAM_CACHE_DIR", str(tmp_path_factory.mktemp("refused-cache")))
        with pytest.raises(LoamError) as caught:
            server.register(folder)
    assert words in str(caught.value) and str(Path(folder) / "model.json") in str(caught.value), str(caught.value)
    assert server.models == {}


def test_activation_none_scores_the_logit(tmp_path_factory: pytest.TempPathFactory) -> None:
    table = json.loads((CROSS / "model.json").read_text(encoding="utf-8"))
    folder = package_copy(tmp_path_factory, "tiny_cross_encoder", name=f"{table['name']}-logits",
                          stages=cross_stage(publish="score", activation="none"))  # fmt: skip
    with serving(tmp_path_factory, folder) as server:
        worker = server.models[f"{SCORER}-logits"].worker
        assert isinstance(worker, FiniteWorker)
        got = [embed(worker, [PairInput(text=QUERY, pair=d)])[0][0] for d in DOCUMENTS[:3]]
    np.testing.assert_allclose(got, logits([(QUERY, d) for d in DOCUMENTS[:3]]), atol=1e-5)


def test_the_appended_sigmoid_keeps_the_outputs_name_and_collides_with_nothing(tmp_path: Path) -> None:
    """A graph whose own names start with the activation's prefix, and whose output another node also reads."""
    taken = "loam_activation/logits"
    nodes = [
        helper.make_node("MatMul", ["x", "w"], [taken], name="loam_activation/sigmoid"),
        helper.make_node("Neg", [taken], ["score"], name="head"),
        helper.make_node("Identity", ["score"], ["also"], name="reader"),
    ]
    graph = helper.make_graph(
        nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["b", 1])],
        initializer=[numpy_helper.from_array(np.array([[1.0], [-2.0], [0.5]], np.float32), "w")],
    )  # fmt: skip
    model = activated_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "sigmoid", tmp_path)
    onnx.checker.check_model(model, full_check=True)  # every value defined once
    assert [o.name for o in model.graph.output] == ["score"]
    assert model.graph.node[-1].op_type == "Sigmoid" and model.graph.node[-1].name == "loam_activation_2/sigmoid"
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 4.0]], np.float32)
    (got,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got, 1.0 / (1.0 + np.exp(x @ np.array([[1.0], [-2.0], [0.5]]))), rtol=1e-6)
    with pytest.raises(LoamError, match="activation 'tanh' is not one of sigmoid, none"):
        activated_model(model, "tanh", tmp_path)
