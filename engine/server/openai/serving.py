"""Logic shared by the OpenAI routes: parsing, model lookup, engine errors, text collection.

Routes stay thin (parse, call, return); the per-endpoint modules build responses on top of
:class:`OpenAIServing`. Runs on the server's event loop and never blocks it: the engine is
reached only through :class:`engine.client.EngineClient`'s async streams.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from engine.client import (
    ERROR,
    LOADING,
    READY,
    RESTARTING,
    STARTING,
    EngineClient,
    EngineUnavailable,
    RequestFailed,
    RequestStream,
)
from engine.gguf import GGUFError
from engine.gguf_check import check_gguf
from engine.models import ModelError, ModelSpec
from engine.server.errors import APIError
from engine.server.json_body import read_json_object
from engine.server.model_info import ModelDirectory
from engine.server.openai import protocol
from engine.server.sampling import sampling_params
from engine.store import ModelStore, StoreError
from engine.worker.messages import Finished, GenerationRequest, OutputConstraint, SamplingParams

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

# How long a request waits for a model to load before answering 503 + Retry-After.
LOAD_WAIT_SECONDS = 20.0
RETRY_AFTER_SECONDS = 5
_INLINE_PARSE_BYTES = 256 * 1024

_REJECT_STATUS: dict[str, int] = {
    "context_length_exceeded": 400,
    "invalid_request": 400,
    "fim_unsupported": 400,
    "no_model": 503,
    "engine_restarting": 503,
    "internal": 500,
}


@dataclass
class Collected:
    """A whole (non-streamed) generation."""

    text: str
    result: Finished
    logprobs: list[tuple[str, float]]


class OpenAIServing:
    """Turns validated requests into engine streams and engine failures into APIErrors.

    Models a request may name: the loaded one (which may have come from a path) and every
    model in the store; naming a stored model that is not loaded loads it.
    """

    def __init__(self, engine: EngineClient, store: ModelStore | None = None) -> None:
        self.engine = engine
        self.store = store
        # Shared with the Ollama and LM Studio surfaces: one record of the models seen.
        self.models = ModelDirectory(engine, store)

    async def parse(self, request: Request, model_type: type[M]) -> M:
        """Read and validate the JSON body; a bad field is a 400 naming it."""
        raw = await request.body()
        # A large body is parsed and checked on a thread: the loop keeps serving streams.
        if len(raw) > _INLINE_PARSE_BYTES:
            data = await asyncio.to_thread(read_json_object, raw)
        else:
            data = read_json_object(raw)
        try:
            parsed = model_type.model_validate(data)
        except ValidationError as exc:
            error = exc.errors()[0]
            param = ".".join(str(p) for p in error["loc"]) or None
            message = error["msg"].removeprefix("Value error, ")
            named = message.split(":", 1)[0]
            if param is None and named in model_type.model_fields:
                param, message = named, message.split(":", 1)[1].strip()
            raise APIError(
                400, f"{param}: {message}" if param else message, param=param, code="invalid_value"
            ) from exc
        unknown: list[str] = getattr(parsed, "unknown_fields", list)()
        if unknown:
            logger.info("%s: ignoring unknown fields %s", request.url.path, ", ".join(unknown))
        return parsed

    async def model_cards(self) -> list[dict[str, Any]]:
        """The loaded model first, then every stored model, as ``/v1/models`` entries."""
        return await asyncio.to_thread(self._model_cards)  # reads every manifest

    async def model_card(self, name: str) -> dict[str, Any]:
        cards = await self.model_cards()
        wanted = self.models.canonical(name)
        for card in cards:
            if card["id"] == wanted:
                return card
        raise _not_found(name)

    def _model_cards(self) -> list[dict[str, Any]]:
        status = self.models.status()
        cards: dict[str, dict[str, Any]] = {}
        if status.model is not None:
            cards[status.model.id] = {**_spec_card(status.model), "status": status.state}
        for spec in self.models.seen.values():
            cards.setdefault(spec.id, {**_spec_card(spec), "status": "available"})
        for stored in self.store.list() if self.store else []:
            if stored.id not in cards:
                info = stored.describe()
                cards[stored.id] = {
                    "created": _mtime(stored.path),
                    "context_length": info.get("context_length"),
                    "format": info.get("format"),
                    "task": info.get("task", "chat"),
                    "capabilities": info.get("capabilities"),
                    "status": "available",
                }
        return [protocol.model_card(mid, **card) for mid, card in cards.items()]

    async def resolve_model(self, name: str) -> ModelSpec:
        """The spec to serve ``name`` with, loading it from the store when needed.

        ``name`` may differ from the id in case and surrounding spaces: a request for
        ``TINY-CODER`` is served by (and never reloads) the loaded ``tiny-coder``.

        Raises:
            APIError: 404 for an unknown (or path-like) name; 503 with Retry-After while a
                model takes longer than :data:`LOAD_WAIT_SECONDS` to load.
        """
        status = self.models.status()
        name = self.models.canonical(name)
        if status.model is None or status.model.id != name:
            # Read on the loop: awaiting here would let a second request start the same load.
            seen = self.models.seen.get(name)
            spec = self._recheck(seen) if seen is not None else self._stored_spec(name)
            if spec.task != "chat":
                raise APIError(
                    400,
                    f"'{name}' is an embedding model; use POST /v1/embeddings with it",
                    param="model",
                    code="model_not_generative",
                )
            current = status.model.id if status.model else "no model"
            logger.info("request for %s: switching from %s", name, current)
            self.engine.load(spec, status.device)
        elif status.state not in (LOADING, RESTARTING, STARTING):
            return status.model
        status = await asyncio.to_thread(self.engine.wait_for, {READY, ERROR}, LOAD_WAIT_SECONDS)
        if status.state == READY and status.model is not None and status.model.id == name:
            return status.model
        if status.state == ERROR:
            raise APIError(
                500, status.message or f"could not load {name}", code="model_load_failed"
            )
        raise APIError(
            503,
            f"{name} is still loading; retry shortly",
            code="model_loading",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )

    async def embedding_spec(self, name: str) -> ModelSpec:
        """The embedding model ``name`` (from the store, or seen this session).

        Raises:
            APIError: 404 for an unknown name, 400 when ``name`` is not an embedding model.
        """
        self.models.status()  # notes the loaded model (perhaps from a path) in seen
        name = self.models.canonical(name)
        spec = self.models.seen.get(name)
        if spec is None:  # reading the store (manifest, config) stays off the event loop
            spec = await asyncio.to_thread(self._stored_spec, name)
        if spec.task != "embeddings":
            raise APIError(
                400,
                f"'{name}' is not an embedding model; embeddings need one (e.g. bge, e5, "
                "nomic-embed) in the model store",
                param="model",
                code="model_not_embedding",
            )
        return spec

    def _stored_spec(self, name: str) -> ModelSpec:
        if self.store is None:
            raise _not_found(name)
        try:
            return self.store.spec(name)
        except StoreError as exc:  # path-like ids land here too, before any file access
            raise _not_found(name) from exc
        except ModelError as exc:
            raise _damaged(name, exc) from exc

    @staticmethod
    def _recheck(spec: ModelSpec) -> ModelSpec:
        """Check a GGUF seen earlier again before the engine opens it: the file may have
        changed since (a cut-short copy). The check is cached by size and mtime."""
        if spec.path.is_file():
            try:
                check_gguf(spec.path)
            except GGUFError as exc:
                raise _damaged(spec.id, exc) from exc
        return spec

    async def start(
        self,
        *,
        messages: list[dict[str, Any]] | None = None,
        prompt: str | None = None,
        max_tokens: int | None,
        stop: tuple[str, ...],
        sampling: SamplingParams,
        chat_template_kwargs: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        constraint: OutputConstraint | None = None,
        suffix: str | None = None,
        logprobs: bool = False,
        cap_max_tokens: bool = False,
    ) -> RequestStream:
        """Submit to the engine and wait until it accepts (or refuses) the request.

        ``cap_max_tokens``: ``max_tokens`` is an upper bound clipped to the context (Ollama's
        ``num_predict``), not a demand refused when it does not fit (OpenAI's ``max_tokens``).
        """
        try:
            stream = self.engine.submit(
                GenerationRequest(
                    messages=messages,
                    prompt=prompt,
                    max_tokens=max_tokens,
                    stop=stop,
                    sampling=sampling,
                    chat_template_kwargs=chat_template_kwargs or {},
                    tools=tools,
                    constraint=constraint,
                    suffix=suffix,
                    logprobs=logprobs,
                    cap_max_tokens=cap_max_tokens,
                )
            )
        except EngineUnavailable as exc:
            raise unavailable(exc) from exc
        try:
            await stream.start()
        except RequestFailed as exc:
            raise request_failed(exc) from exc
        return stream

    async def collect(self, stream: RequestStream) -> Collected:
        """Gather a whole generation; an engine failure becomes a 5xx."""
        pieces: list[str] = []
        logprobs: list[tuple[str, float]] = []
        async for event in stream:
            logprobs.extend((t.token, t.logprob) for t in event.logprobs)
            if isinstance(event, Finished):
                if event.finish_reason == "error":
                    raise APIError(
                        503,
                        event.error or "generation failed",
                        code="engine_error",
                        headers={"Retry-After": "2"},
                    )
                pieces.append(event.text)
                return Collected("".join(pieces), event, logprobs)
            pieces.append(event.text)
        raise APIError(500, "the engine ended the request without a result")


def _damaged(name: str, exc: Exception) -> APIError:
    # 422: the request is fine but names a model whose files cannot be served; the fix is
    # the person's (remove or re-download it), not a retry.
    return APIError(
        422,
        f"the model '{name}' is damaged: {exc}; remove it (sidelight rm) and download it again",
        param="model",
        code="model_damaged",
    )


def _not_found(name: str) -> APIError:
    return APIError(
        404,
        f"The model '{name}' does not exist; see GET /v1/models",
        param="model",
        code="model_not_found",
    )


def _mtime(path: Path) -> int:
    try:
        return int(path.stat().st_mtime)
    except OSError:
        return protocol.now()


def _spec_card(spec: ModelSpec) -> dict[str, Any]:
    return {
        "created": _mtime(spec.path),
        "context_length": spec.context_length,
        "format": spec.format,
        "task": "chat",
    }


def request_failed(exc: RequestFailed, internal_code: str | None = None) -> APIError:
    """The HTTP error for a request the engine refused: a 4xx naming the field when the
    request was at fault; ``internal_code`` replaces the code of a 500."""
    status = _REJECT_STATUS.get(exc.code, 500)
    headers = {"Retry-After": "2"} if status == 503 else None
    code = internal_code if status == 500 and internal_code else exc.code
    return APIError(status, str(exc), param=exc.param, code=code, headers=headers)


def unavailable(exc: EngineUnavailable) -> APIError:
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
    return APIError(503, str(exc), code=f"engine_{exc.state}", headers=headers)


def sampling_from(request: Any) -> SamplingParams:
    return sampling_params(
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        min_p=request.min_p,
        seed=request.seed,
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        repetition_penalty=request.repetition_penalty,
        ignore_eos=request.ignore_eos,
    )


def timings(result: Finished) -> dict[str, Any]:
    """llama.cpp-style timings: what the chat window shows as TTFT and tokens/s."""
    decode_tokens = max(result.completion_tokens - 1, 0)
    tps = decode_tokens / result.decode_seconds if result.decode_seconds and decode_tokens else None
    return {
        "prompt_n": result.prompt_tokens,
        "predicted_n": result.completion_tokens,
        "ttft_ms": round(result.ttft_seconds * 1000, 1) if result.ttft_seconds else None,
        "predicted_per_second": round(tps, 2) if tps else None,
    }
