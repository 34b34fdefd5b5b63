"""Request and response of the rerank API (the Jina/Cohere shape).

A request names a reranker, a ``query`` and ``documents`` (strings, or objects with a
``text`` as Cohere's v1 and Jina accept); ``top_n`` keeps the best few and
``return_documents`` echoes each document's text. The response lists ``results`` as
``{index, relevance_score, document?}``, best first, with the model and token ``usage``.
Unknown fields (Cohere's ``rank_fields``, ``max_chunks_per_doc``) are accepted and logged.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.server.fields import MAX_RERANK_DOCUMENTS, Int64


class RerankDocument(BaseModel):
    """One document: an object with ``text``, or a plain string (read as its text)."""

    model_config = ConfigDict(extra="allow")
    text: str

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        return {"text": value} if isinstance(value, str) else value


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    query: str
    documents: list[RerankDocument] = Field(min_length=1, max_length=MAX_RERANK_DOCUMENTS)
    top_n: Int64 | None = Field(default=None, ge=1)
    return_documents: bool = False

    def unknown_fields(self) -> list[str]:
        return sorted((self.model_extra or {}).keys())

    def texts(self) -> list[str]:
        return [document.text for document in self.documents]


def rerank_response(
    model: str, body: RerankRequest, scores: list[float], prompt_tokens: int
) -> dict[str, Any]:
    """The results, highest score first (equal scores keep the documents' order)."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    if body.top_n is not None:
        order = order[: body.top_n]
    results: list[dict[str, Any]] = []
    for index in order:
        result: dict[str, Any] = {"index": index, "relevance_score": scores[index]}
        if body.return_documents:
            result["document"] = {"text": body.documents[index].text}
        results.append(result)
    return {
        "id": f"rerank-{uuid.uuid4().hex}",
        "model": model,
        "results": results,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
