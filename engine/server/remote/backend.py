"""One remote model as the pipeline's :class:`engine.server.pipeline.engine.RemoteTarget`:
a streamed OpenAI request (httpx, async) whose chunks become reply events.

Failures are :class:`APIError` naming the remote, before any byte reaches the caller when
they happen before the first chunk: unreachable 502 ``remote_unreachable``, a connect or
read timeout 504 ``remote_timeout``, a 4xx from the remote the same status with its
message after the remote's name (a 501, an endpoint it does not serve: 400
``remote_unsupported``), a 5xx 502 ``remote_error``. After the first chunk the
same errors end the caller's stream with its dialect's error event (a remote killed
mid-reply: 502 ``remote_stream_broken``).

The key: each request carries its own remote's ``Authorization`` header and nothing else
of the caller's; redirects are not followed (a redirect elsewhere would carry the key)
and no proxy from the environment is used. Headers are never logged.

Threading: a client per request, on the loop that runs the request (the server's, or the
desktop chat's own): nothing is shared between loops. :meth:`RemoteStream.cancel` may be
called from any thread; the stream ends at the next chunk with ``Done(cancelled)``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from engine.models import ModelSpec
from engine.parsing import ReplyEvent
from engine.remotes.registry import Remote
from engine.server.errors import APIError
from engine.server.pipeline.events import Done, Logprobs
from engine.server.pipeline.request import GenerateRequest
from engine.server.remote.wire import ChunkReader, error_text, request_body, uses_completions
from engine.worker.messages import Embedded, Reranked

logger = logging.getLogger(__name__)

MAX_ERROR_BYTES = 64 * 1024  # of a refusal's body read to find its message
MAX_LINE_BYTES = 8 * 1024 * 1024  # one SSE line (a chunk); a longer one is a broken stream
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # an embeddings or rerank answer


@dataclass(frozen=True)
class Timeouts:
    """Seconds to connect, and the longest silence while reading (``Settings.remote_*``)."""

    connect: float
    read: float

    def httpx(self) -> httpx.Timeout:
        return httpx.Timeout(self.read, connect=self.connect, pool=self.connect)


def client(remote: Remote, timeouts: Timeouts) -> httpx.AsyncClient:
    """An async client for ``remote`` alone: its base URL, its key, no redirects, no proxy."""
    return httpx.AsyncClient(
        base_url=remote.api_base,
        headers=remote.headers(),
        timeout=timeouts.httpx(),
        follow_redirects=False,
        trust_env=False,
    )


def transport_error(remote: Remote, exc: httpx.HTTPError, *, midway: bool = False) -> APIError:
    """The caller's error for a failed exchange with ``remote`` (never its headers)."""
    where = f"remote '{remote.name}' ({remote.url})"
    if isinstance(exc, httpx.TimeoutException):
        what = "connect" if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout) else "read"
        return APIError(
            504,
            f"{where} did not answer in time ({what} timeout"
            f"{' mid-reply' if midway else ''}); try again, or raise "
            "SIDELIGHT_REMOTE_READ_TIMEOUT_SECONDS for a slow model",
            code="remote_timeout",
        )
    if midway:
        return APIError(
            502,
            f"{where} closed the stream mid-reply ({type(exc).__name__}); the reply is cut",
            code="remote_stream_broken",
        )
    return APIError(
        502,
        f"{where} is unreachable ({type(exc).__name__}: {exc}); is it running?",
        code="remote_unreachable",
    )


def refusal(remote: Remote, status: int, raw: bytes) -> APIError:
    """The caller's error for the remote's own HTTP error: a 4xx keeps its status (the
    request was at fault there), a 501 (what llama-server answers for an endpoint it was
    not started with) is a 400 ``remote_unsupported``, anything else is a 502."""
    message, code, param = error_text(raw)
    text = f"remote '{remote.name}': {message}"
    if status == 501:
        return APIError(400, f"{text} (it does not support this)", code="remote_unsupported")
    if 400 <= status < 500:
        return APIError(status, text, param=param, code=code or "remote_refused")
    return APIError(502, f"{text} (HTTP {status})", code="remote_error")


class RemoteModel:
    """``MODEL@NAME``: the remote ``remote``'s model ``model`` (its own spelling)."""

    def __init__(self, remote: Remote, model: str, spec: ModelSpec, timeouts: Timeouts) -> None:
        self.remote = remote
        self.model = model
        self.spec = spec
        self._timeouts = timeouts

    async def start(self, request: GenerateRequest) -> RemoteStream:
        """Send ``request``; returns once the remote answered 200 (its stream unread).

        Raises:
            APIError: the remote is unreachable (502), slow (504) or refused (its 4xx, or
                502 for its 5xx), each naming it.
        """
        completions = uses_completions(request)
        body = request_body(request, self.model)
        path = "/completions" if completions else "/chat/completions"
        http = client(self.remote, self._timeouts)
        try:
            response = await _send(http, path, body)
        except httpx.HTTPError as exc:
            await http.aclose()
            raise transport_error(self.remote, exc) from exc
        except BaseException:
            await http.aclose()
            raise
        if response.status_code != 200:
            try:
                raw = await _read_some(response, MAX_ERROR_BYTES)
            except httpx.HTTPError:
                raw = b""
            finally:
                await response.aclose()
                await http.aclose()
            raise refusal(self.remote, response.status_code, raw)
        reader = ChunkReader(completions=completions, logprobs=request.logprobs)
        return RemoteStream(self.remote, http, response, reader)

    async def embed(self, texts: list[str]) -> Embedded:
        """The remote's embeddings of ``texts``, in order.

        Raises:
            APIError: as :meth:`start`, and 502 when the answer is not OpenAI's shape.
        """
        body = await self._post("/embeddings", {"model": self.model, "input": texts})
        try:
            items = sorted(body["data"], key=lambda item: int(item["index"]))
            vectors = [[float(x) for x in item["embedding"]] for item in items]
            if len(vectors) != len(texts):
                raise ValueError(f"{len(vectors)} vectors for {len(texts)} texts")
        except (KeyError, TypeError, ValueError) as exc:
            raise self._bad_answer("embeddings", exc) from exc
        return Embedded(0, vectors, _prompt_tokens(body))

    async def rerank(self, query: str, documents: list[str]) -> Reranked:
        """The remote's relevance score of each document, in the documents' order.

        Raises:
            APIError: as :meth:`start`, and 502 when the answer is not the Jina/Cohere shape.
        """
        payload = {"model": self.model, "query": query, "documents": documents}
        body = await self._post("/rerank", payload)
        scores = [0.0] * len(documents)
        try:
            results = body["results"]
            if len(results) != len(documents):
                raise ValueError(f"{len(results)} results for {len(documents)} documents")
            for item in results:
                scores[int(item["index"])] = float(item["relevance_score"])
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise self._bad_answer("rerank", exc) from exc
        return Reranked(0, scores, _prompt_tokens(body))

    async def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST ``payload``, the JSON answer (at most ``MAX_ANSWER_BYTES``)."""
        async with client(self.remote, self._timeouts) as http:
            try:
                async with http.stream("POST", path, json=payload) as response:
                    raw = await _read_some(response, MAX_ANSWER_BYTES + 1)
                    status = response.status_code
            except httpx.HTTPError as exc:
                raise transport_error(self.remote, exc) from exc
        if status != 200:
            raise refusal(self.remote, status, raw)
        if len(raw) > MAX_ANSWER_BYTES:
            raise self._bad_answer(path.strip("/"), ValueError("the answer is too large"))
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise self._bad_answer(path.strip("/"), exc) from exc
        if not isinstance(body, dict):
            raise self._bad_answer(path.strip("/"), ValueError("not a JSON object"))
        return body

    def _bad_answer(self, what: str, exc: Exception) -> APIError:
        return APIError(
            502,
            f"remote '{self.remote.name}' answered {what} in a shape that is not OpenAI's: {exc}",
            code="remote_bad_answer",
        )


def _prompt_tokens(body: dict[str, Any]) -> int:
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return 0
    value = usage.get("prompt_tokens", usage.get("total_tokens"))
    return value if isinstance(value, int) and value >= 0 else 0


async def _send(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST ``body`` as a stream; a refused connection is tried once more (nothing reached
    the remote, so nothing runs twice). A timeout is not retried: it already took its bound."""
    try:
        return await http.send(http.build_request("POST", path, json=body), stream=True)
    except httpx.ConnectError:
        logger.debug("connecting to %s failed; trying once more", http.base_url)
        return await http.send(http.build_request("POST", path, json=body), stream=True)


async def _read_some(response: httpx.Response, limit: int) -> bytes:
    out = bytearray()
    async for piece in response.aiter_bytes():
        out += piece
        if len(out) >= limit:
            break
    return bytes(out[:limit])


class RemoteStream:
    """One answer streaming from a remote: iterate once for its events, ending with
    :class:`Done`; :meth:`aclose` frees the connection (idempotent)."""

    def __init__(
        self,
        remote: Remote,
        http: httpx.AsyncClient,
        response: httpx.Response,
        reader: ChunkReader,
    ) -> None:
        self._remote = remote
        self._http = http
        self._response = response
        self._reader = reader
        self._cancelled = False

    def cancel(self) -> None:
        """Stop reading (any thread): the stream ends at its next chunk, cancelled."""
        self._cancelled = True

    async def aclose(self) -> None:
        await self._response.aclose()
        await self._http.aclose()

    def __aiter__(self) -> AsyncIterator[ReplyEvent | Logprobs | Done]:
        return self._events()

    async def _events(self) -> AsyncGenerator[ReplyEvent | Logprobs | Done, None]:
        reader = self._reader
        ended = False
        try:
            async for data in self._data():
                if self._cancelled:
                    break
                if data == "[DONE]":
                    ended = True
                    break
                for event in self._read(data):
                    yield event
        except httpx.HTTPError as exc:
            raise transport_error(self._remote, exc, midway=True) from exc
        finally:
            await self.aclose()
        if not ended and not self._cancelled and reader.finish_reason is None:
            raise APIError(
                502,
                f"remote '{self._remote.name}' ({self._remote.url}) ended the stream "
                "mid-reply (no finish reason, no [DONE]); the reply is cut",
                code="remote_stream_broken",
            )
        ends, done = reader.finish(cancelled=self._cancelled)
        for event in ends:
            yield event
        yield done

    async def _data(self) -> AsyncGenerator[str, None]:
        """Each ``data:`` payload of the SSE stream (other fields and comments skipped)."""
        async for line in self._response.aiter_lines():
            if len(line) > MAX_LINE_BYTES:
                raise APIError(
                    502,
                    f"remote '{self._remote.name}' sent a stream line over "
                    f"{MAX_LINE_BYTES} bytes; the reply is cut",
                    code="remote_stream_broken",
                )
            if line.startswith("data:"):
                yield line[5:].strip()

    def _read(self, data: str) -> list[ReplyEvent | Logprobs]:
        """One payload's events; a payload that is not an OpenAI chunk ends the reply."""
        chunk = self._chunk(data)
        try:
            return self._reader.feed(chunk)
        except ValueError as exc:
            raise APIError(
                502,
                f"remote '{self._remote.name}' sent a chunk that is not OpenAI's: {exc}",
                code="remote_bad_stream",
            ) from exc

    def _chunk(self, data: str) -> dict[str, Any]:
        try:
            chunk = json.loads(data)
            if not isinstance(chunk, dict):
                raise ValueError("a chunk is not a JSON object")
        except ValueError as exc:
            raise APIError(
                502,
                f"remote '{self._remote.name}' sent a chunk that is not OpenAI's: {exc}",
                code="remote_bad_stream",
            ) from exc
        error = chunk.get("error")
        if error is not None:  # an error event mid-stream (Sidelight, vLLM send these)
            message, _, _ = error_text(json.dumps({"error": error}).encode())
            raise APIError(502, f"remote '{self._remote.name}': {message}", code="remote_error")
        return chunk
