"""Logic shared by the OpenAI routes: parsing, model lookup, engine errors, text collection.

Routes stay thin (parse, call, return); the per-endpoint modules build responses on top of
:class:`OpenAIServing`. Runs on the server's event loop and never blocks it: the engine is
reached only through :class:`engine.client.EngineClient`'s async streams.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from engine.client import EngineClient, EngineUnavailable, RequestFailed, RequestStream
from engine.models import ModelSpec
from engine.server.errors import APIError
from engine.worker.messages import Finished, SamplingParams

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

_REJECT_STATUS = {
    "context_length_exceeded": 400,
    "invalid_request": 400,
    "no_model": 503,
    "engine_restarting": 503,
    "internal": 500,
}


@dataclass
class Collected:
    """A whole (non-streamed) generation."""

    text: str
    result: Finished


class OpenAIServing:
    """Turns validated requests into engine streams and engine failures into APIErrors."""

    def __init__(self, engine: EngineClient) -> None:
        self.engine = engine

    async def parse(self, request: Request, model_type: type[M]) -> M:
        """Read and validate the JSON body; a bad field is a 400 naming it."""
        try:
            raw = await request.body()
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise APIError(400, f"the request body is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise APIError(400, "the request body must be a JSON object")
        try:
            parsed = model_type.model_validate(data)
        except ValidationError as exc:
            error = exc.errors()[0]
            param = ".".join(str(p) for p in error["loc"]) or None
            message = error["msg"].removeprefix("Value error, ")
            raise APIError(
                400, f"{param}: {message}" if param else message, param=param, code="invalid_value"
            ) from exc
        unknown: list[str] = getattr(parsed, "unknown_fields", list)()
        if unknown:
            logger.info("%s: ignoring unknown fields %s", request.url.path, ", ".join(unknown))
        return parsed

    def models(self) -> list[ModelSpec]:
        status = self.engine.status()
        return [status.model] if status.model is not None else []

    def resolve_model(self, name: str) -> ModelSpec:
        for spec in self.models():
            if name == spec.id:
                return spec
        available = ", ".join(s.id for s in self.models()) or "none loaded"
        raise APIError(
            404,
            f"The model '{name}' does not exist (available: {available})",
            param="model",
            code="model_not_found",
        )

    async def start(
        self,
        *,
        messages: list[dict[str, Any]] | None = None,
        prompt: str | None = None,
        max_tokens: int | None,
        stop: tuple[str, ...],
        sampling: SamplingParams,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> RequestStream:
        """Submit to the engine and wait until it accepts (or refuses) the request."""
        try:
            stream = self.engine.submit(
                messages=messages,
                prompt=prompt,
                max_tokens=max_tokens,
                stop=stop,
                sampling=sampling,
                chat_template_kwargs=chat_template_kwargs,
            )
        except EngineUnavailable as exc:
            raise unavailable(exc) from exc
        try:
            await stream.start()
        except RequestFailed as exc:
            status = _REJECT_STATUS.get(exc.code, 500)
            headers = {"Retry-After": "2"} if status == 503 else None
            raise APIError(
                status, str(exc), param=exc.param, code=exc.code, headers=headers
            ) from exc
        return stream

    async def collect(self, stream: RequestStream) -> Collected:
        """Gather a whole generation; an engine failure becomes a 5xx."""
        pieces: list[str] = []
        async for event in stream:
            if isinstance(event, Finished):
                if event.finish_reason == "error":
                    raise APIError(
                        503,
                        event.error or "generation failed",
                        code="engine_error",
                        headers={"Retry-After": "2"},
                    )
                pieces.append(event.text)
                return Collected("".join(pieces), event)
            pieces.append(event.text)
        raise APIError(500, "the engine ended the request without a result")


def unavailable(exc: EngineUnavailable) -> APIError:
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
    return APIError(503, str(exc), code=f"engine_{exc.state}", headers=headers)


def sampling_from(request: Any) -> SamplingParams:
    return SamplingParams(
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k if request.top_k not in (None, -1, 0) else None,
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
