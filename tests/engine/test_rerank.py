"""Reranking in the engine worker: the tiny cross-encoder through GenAI's TextRerankPipeline.

The reference scores come from the same checkpoint run through transformers (torch) by
``tests/models/build_tiny_rerank_model.py``; the worker must reproduce them and their order.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.models import ModelSpec, spec_from_path, task_from_config
from engine.supervisor.client import EngineClient
from engine.supervisor.states import ERROR, READY, RequestFailed
from engine.worker.rerank import pair_limit
from tests.conftest import ROOT
from tests.engine.chat_beside import assert_chat_went_on, chat_beside
from tests.engine.test_client import make_client

TINY_RERANK = ROOT / "tests" / "fixtures" / "tiny-rerank"
REFERENCE = json.loads((TINY_RERANK / "reference.json").read_text())["cases"]
SPEC = ModelSpec("tiny-rerank", TINY_RERANK, "ir", task="rerank")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineClient]:
    client = make_client(tmp_path_factory.mktemp("home"), "batched")
    client.start()
    client.load(spec_from_path(ROOT / "resources" / "models" / "sidelight-demo"))
    status = client.wait_for({READY, ERROR}, 120)
    assert status.state == READY, status.message
    yield client
    client.close()


def _logit(score: float) -> float:
    return math.log(score / (1.0 - score))


@pytest.mark.parametrize("case", REFERENCE, ids=[c["query"] for c in REFERENCE])
async def test_scores_match_the_reference_model(engine: EngineClient, case: dict[str, Any]) -> None:
    result = await engine.rerank(SPEC, case["query"], case["documents"])
    assert result.scores == pytest.approx(case["scores"], abs=1e-3)
    # Closer where the sigmoid flattens: the logits behind the scores.
    assert [_logit(s) for s in result.scores] == pytest.approx(case["logits"], abs=1e-3)
    order = sorted(range(len(result.scores)), key=lambda i: -result.scores[i])
    assert order == case["order"] and order[0] == case["relevant"]
    assert result.prompt_tokens > len(case["documents"]) * 3  # every pair, specials and all


async def test_chunks_change_no_score(engine: EngineClient) -> None:
    """Many documents go through in several chunks; each scores as it does alone."""
    case = REFERENCE[0]
    documents = case["documents"] * 40
    result = await engine.rerank(SPEC, case["query"], documents)
    assert len(result.scores) == len(documents)
    assert result.scores == pytest.approx(case["scores"] * 40, abs=1e-6)


async def test_a_pair_longer_than_the_model_reads_is_refused(engine: EngineClient) -> None:
    """Never silently cut: the document (or the query) that does not fit is named."""
    pid = engine.status().worker_pid
    query = REFERENCE[0]["query"]
    limit = pair_limit(TINY_RERANK)
    assert limit == 128
    long_document = "pip " * 200
    with pytest.raises(RequestFailed) as info:
        await engine.rerank(SPEC, query, ["short", "pip", long_document])
    assert (info.value.code, info.value.param) == ("invalid_request", "documents.2")
    assert "at most 128" in str(info.value)
    with pytest.raises(RequestFailed) as info:
        await engine.rerank(SPEC, "pip " * 200, ["short"])
    assert (info.value.code, info.value.param) == ("invalid_request", "query")
    # Just fitting: 3 specials + query + document = 128 tokens.
    query_tokens = len(query.split())
    fits = await engine.rerank(SPEC, query, ["pip " * (128 - 3 - query_tokens)])
    assert fits.prompt_tokens == 128
    with pytest.raises(RequestFailed):
        await engine.rerank(SPEC, query, ["pip " * (128 - 2 - query_tokens)])
    assert engine.status().worker_pid == pid


async def test_text_that_is_not_unicode_is_refused(engine: EngineClient) -> None:
    pid = engine.status().worker_pid
    with pytest.raises(RequestFailed) as info:
        await engine.rerank(SPEC, "fine", ["fine", "broken \ud800"])
    assert (info.value.code, info.value.param) == ("invalid_request", "documents.1")
    with pytest.raises(RequestFailed) as info:
        await engine.rerank(SPEC, "\udfff", ["fine"])
    assert info.value.param == "query"
    assert len((await engine.rerank(SPEC, "fine", ["fine"])).scores) == 1
    assert engine.status().worker_pid == pid


async def test_inputs_that_broke_the_paired_tokenizer(engine: EngineClient) -> None:
    """Scored, or refused with a 400-class error; the worker never dies of them.

    Given several documents at once, openvino-tokenizers 2026.4 wrote past its buffer when
    the query was longer than the documents or several documents were empty (the worker
    died of a corrupted heap), and failed outright on an all-empty batch.
    """
    pid = engine.status().worker_pid
    long_query = await engine.rerank(SPEC, "pip " * 20, ["x"] * 4)  # one chunk, or more
    assert len(set(long_query.scores)) == 1 and len(long_query.scores) == 4
    for documents, param in (
        (["pip", "", "", "", ""], "documents.1"),
        (["\ufeff", "\u202e", "\ufeff"], "documents.0"),  # characters the tokenizer drops
    ):
        with pytest.raises(RequestFailed) as info:
            await engine.rerank(SPEC, "pip", documents)
        assert (info.value.code, info.value.param) == ("invalid_request", param)
        assert "no text" in str(info.value)
    assert len((await engine.rerank(SPEC, "", ["pip", "x"])).scores) == 2  # an empty query
    assert engine.status().worker_pid == pid


def test_a_big_rerank_does_not_stall_a_chat_stream(sidelight_home: Path) -> None:
    """The worker reranks in chunks with chat steps in between: tokens keep arriving."""
    client = make_client(sidelight_home, "batched")
    client.start()
    client.load(spec_from_path(ROOT / "resources" / "models" / "sidelight-demo"))
    assert client.wait_for({READY, ERROR}, 120).state == READY
    documents = [f"our team wrote about pip and document {i} today." for i in range(4000)]

    async def scenario() -> tuple[int, list[float], float, float]:
        await client.rerank(SPEC, "warm up", ["warm up"])  # the load is not what is measured
        result, arrivals, started, finished = await chat_beside(
            client, lambda: client.rerank(SPEC, "why is my pip so slow", documents)
        )
        return len(result.scores), arrivals, started, finished

    try:
        scored, arrivals, started, finished = asyncio.run(scenario())
        assert scored == len(documents)
        assert_chat_went_on(arrivals, started, finished)
    finally:
        client.close()


def test_the_task_comes_from_the_architecture() -> None:
    def task(architecture: str, **extra: Any) -> str:
        return task_from_config({"architectures": [architecture], **extra})

    assert task("Qwen2ForCausalLM") == "chat"
    assert task("BertModel") == "embeddings"
    assert task("XLMRobertaForSequenceClassification", id2label={"0": "LABEL_0"}) == "rerank"
    assert task("BertForSequenceClassification", num_labels=1) == "rerank"
    # A classifier of several labels is no reranker (GenAI's softmax path is not served).
    assert task("BertForSequenceClassification", id2label={"0": "a", "1": "b"}) == "embeddings"
    assert task_from_config({}) == "chat"
    assert spec_from_path(TINY_RERANK).task == "rerank"


def test_the_pair_limit_comes_from_the_tokenizer_within_the_positions(tmp_path: Path) -> None:
    def limit(config: dict[str, Any], tokenizer: dict[str, Any] | None = None) -> int | None:
        (tmp_path / "config.json").write_text(json.dumps(config))
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(tokenizer or {}))
        return pair_limit(tmp_path)

    assert limit({"model_type": "bert", "max_position_embeddings": 512}) == 512
    # XLM-RoBERTa (bge-reranker) states 514 positions, two of them taken by the padding.
    assert limit({"model_type": "xlm-roberta", "max_position_embeddings": 514}) == 512
    assert limit({"max_position_embeddings": 8192}, {"model_max_length": 1024}) == 1024
    assert limit({}, {"model_max_length": 10**30}) is None  # "no limit", as tokenizers say it
    assert limit({}) is None
