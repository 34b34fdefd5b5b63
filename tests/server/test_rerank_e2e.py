"""``POST /v1/rerank`` and ``/rerank`` on a real ``sidelight serve``, through httpx.

The server chats with the demo model; the store holds the tiny cross-encoder reranker
(``tests/fixtures/tiny-rerank``) and the tiny embedding model. The reranker's scores must
match the same checkpoint run through transformers (``reference.json``, written by the
fixture's build script) and order the documents as it does. Bodies are sent as the Jina and
Cohere (v1) APIs and llama-server take them; after each test the engine worker must not
have restarted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.harness import (
    TINY_RERANK,
    ServerProcess,
    running_server,
    store_embedding_model,
    store_rerank_model,
)

pytestmark = pytest.mark.slow

REFERENCE: list[dict[str, Any]] = json.loads((TINY_RERANK / "reference.json").read_text())["cases"]
RERANKER = "tiny-rerank"
DEMO = "sidelight-demo"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("rerank-home")
    store_rerank_model(home)
    store_embedding_model(home)
    with running_server(home, tiny_model) as proc:
        yield proc


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    """A client whose test fails if the engine worker restarted meanwhile (it crashed)."""
    health = server.health().json()
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        yield client
    after = server.health().json()
    assert (after["restarts"], after["worker_pid"]) == (health["restarts"], health["worker_pid"])


def refused(response: httpx.Response, status: int = 400) -> tuple[str, str | None]:
    """The message and param of an error answer (OpenAI's shape)."""
    assert response.status_code == status, response.text
    assert "Traceback" not in response.text
    error = response.json()["error"]
    return error["message"], error["param"]


def _logit(score: float) -> float:
    return math.log(score / (1.0 - score))


@pytest.mark.parametrize("case", REFERENCE, ids=[c["query"] for c in REFERENCE])
def test_scores_and_order_match_the_reference_model(
    http: httpx.Client, case: dict[str, Any]
) -> None:
    body = {"model": RERANKER, "query": case["query"], "documents": case["documents"]}
    answer = http.post("/v1/rerank", json=body)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert data["model"] == RERANKER
    results = data["results"]
    assert [r["index"] for r in results] == case["order"]
    assert results[0]["index"] == case["relevant"]  # the held-out relevant document
    for result in results:
        index, score = result["index"], result["relevance_score"]
        assert score == pytest.approx(case["scores"][index], abs=1e-3)
        assert _logit(score) == pytest.approx(case["logits"][index], abs=1e-3)
        assert "document" not in result  # only when asked for
    usage = data["usage"]
    assert usage["prompt_tokens"] == usage["total_tokens"] > len(case["documents"]) * 3


def test_cohere_shaped_objects_top_n_and_documents_returned(http: httpx.Client) -> None:
    """Cohere's v1 body: documents as objects (extra fields ignored), top_n, documents back."""
    case = REFERENCE[1]
    documents = [{"text": text, "title": f"doc {i}"} for i, text in enumerate(case["documents"])]
    body = {
        "model": RERANKER,
        "query": case["query"],
        "documents": documents,
        "top_n": 2,
        "return_documents": True,
        "rank_fields": ["text"],  # Cohere's; logged and ignored
    }
    data = http.post("/rerank", json=body).json()
    assert [r["index"] for r in data["results"]] == case["order"][:2]
    for result in data["results"]:
        assert result["document"] == {"text": case["documents"][result["index"]]}
    # Plain strings score the same; top_n past the count returns them all.
    strings = {**body, "documents": case["documents"], "top_n": 100, "return_documents": False}
    every = http.post("/v1/rerank", json=strings).json()["results"]
    assert [r["index"] for r in every] == case["order"]
    assert every[:2] == [{k: v for k, v in r.items() if k != "document"} for r in data["results"]]


def test_one_document(http: httpx.Client) -> None:
    body = {"model": "TINY-RERANK ", "query": "pip", "documents": ["pytest tips"]}
    data = http.post("/v1/rerank", json=body).json()
    assert data["model"] == RERANKER and [r["index"] for r in data["results"]] == [0]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"documents": []}, "documents"),
        ({"documents": ["x"] * 1025}, "documents"),
        ({"documents": "not a list"}, "documents"),
        ({"documents": ["ok", {"title": "no text"}]}, "documents.1.text"),
        ({"documents": [7]}, "documents.0"),
        ({"documents": ["ok", "", ""]}, "documents.1"),  # no tokens: nothing to score
        ({"documents": ["ok", {"text": 7}]}, "documents.1.text"),
        ({"top_n": 0}, "top_n"),
        ({"top_n": -1}, "top_n"),
        ({"top_n": 2**64}, "top_n"),
        ({"top_n": 1.5}, "top_n"),
        ({"query": None}, "query"),
        ({"query": ["a", "b"]}, "query"),
        ({"return_documents": "maybe"}, "return_documents"),
        ({"model": None}, "model"),
    ],
)
def test_bad_fields_are_400s_naming_them(
    http: httpx.Client, body: dict[str, Any], param: str
) -> None:
    full = {"model": RERANKER, "query": "pip", "documents": ["a", "b"], **body}
    _, named = refused(http.post("/v1/rerank", json=full))
    assert named == param


def test_a_document_past_the_model_length_is_a_400_never_cut(http: httpx.Client) -> None:
    body = {"model": RERANKER, "query": "pip", "documents": ["pip", "pip " * 10, "pip " * 300]}
    message, param = refused(http.post("/v1/rerank", json=body))
    assert param == "documents.2" and "at most 128" in message
    body = {"model": RERANKER, "query": "pip " * 300, "documents": ["pip"]}
    assert refused(http.post("/v1/rerank", json=body))[1] == "query"


def test_text_that_is_not_unicode_is_a_400(http: httpx.Client) -> None:
    raw = '{"model": "tiny-rerank", "query": "pip", "documents": ["ok", "bad \\ud800"]}'
    answer = http.post("/v1/rerank", content=raw, headers={"content-type": "application/json"})
    assert refused(answer)[1] == "documents.1"
    raw = '{"model": "tiny-rerank", "query": "\\udfff", "documents": ["ok"]}'
    answer = http.post("/rerank", content=raw, headers={"content-type": "application/json"})
    assert refused(answer)[1] == "query"


def test_models_that_are_not_rerankers(http: httpx.Client) -> None:
    body = {"query": "pip", "documents": ["a"]}
    message, _ = refused(http.post("/v1/rerank", json={**body, "model": "no-such"}), 404)
    assert "no-such" in message
    for other in (DEMO, "tiny-embed"):
        answer = http.post("/v1/rerank", json={**body, "model": other})
        message, param = refused(answer)
        assert param == "model" and answer.json()["error"]["code"] == "model_not_reranker"
    # ...and the reranker is no chat model: the error says where it belongs.
    chat = {"model": RERANKER, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    message, param = refused(http.post("/v1/chat/completions", json=chat))
    assert param == "model" and "/v1/rerank" in message
    message, _ = refused(http.post("/v1/embeddings", json={"model": RERANKER, "input": "x"}))
    assert "not an embedding model" in message


def test_the_reranker_is_listed_and_chat_goes_on(http: httpx.Client) -> None:
    cards = {card["id"]: card for card in http.get("/v1/models").json()["data"]}
    assert cards[RERANKER]["task"] == "rerank"
    http.post("/v1/rerank", json={"model": RERANKER, "query": "pip", "documents": ["a"]})
    chat = {"model": DEMO, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}
    answer = http.post("/v1/chat/completions", json=chat)
    assert answer.status_code == 200 and answer.json()["model"] == DEMO
    assert http.get("/health").json()["model"] == DEMO  # the chat model was never evicted
