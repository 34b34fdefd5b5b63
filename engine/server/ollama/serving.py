"""Logic of the Ollama-compatible API shared by its routes: names, options, model metadata.

Generation goes through the same :class:`engine.server.pipeline.Pipeline` as ``/v1`` (model
loading on demand, engine admission, reply parsing, error mapping), so both surfaces behave
alike; this module only translates Ollama's names and fields. Runs on the server's event
loop and never blocks it: file reads happen in :class:`ModelDirectory` on a worker thread.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from engine.echo import clip
from engine.models import GENERATIVE_TASKS, ModelSpec
from engine.server.errors import APIError
from engine.server.keep_alive import parse_keep_alive
from engine.server.model_info import ModelInfo
from engine.server.ollama import protocol
from engine.server.pipeline import Pipeline
from engine.server.sampling import sampling_params
from engine.supervisor.states import LOADING, READY
from engine.worker.messages import SamplingParams

logger = logging.getLogger(__name__)

MODEL_MANAGER_HINT = (
    "manage models with the Sidelight tray's model manager or the sidelight command "
    "(sidelight pull / import / rm / list)"
)


@dataclass(frozen=True)
class Resolved:
    """A request's model, ready to generate with, and how long loading it took."""

    info: ModelInfo
    spec: ModelSpec
    load_seconds: float


def not_found(name: str) -> APIError:
    return APIError(404, f"model '{clip(name)}' not found", code="model_not_found")


def strip_tag(name: str) -> str:
    """``qwen:latest`` -> ``qwen``; other tags stay (and will not match any Sidelight id)."""
    name = name.strip()
    return name[: -len(":latest")] if name.lower().endswith(":latest") else name


def unsupported(action: str) -> APIError:
    return APIError(
        501, f"{action} is not supported by Sidelight's Ollama API; {MODEL_MANAGER_HINT}"
    )


class OllamaServing:
    """Model lookup, metadata and option mapping for the ``/api`` routes."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.models = pipeline.models

    async def find(self, name: str, action: str | None = None) -> ModelInfo:
        """The model ``name`` names (``:latest`` allowed).

        Raises:
            APIError: 404 ``model 'name' not found``; 400 when the model cannot do
                ``action`` (``chat``, ``generate``).
        """
        info = await self.models.find(strip_tag(name)) if name else None
        if info is None:
            raise not_found(name)
        if action is not None and info.task not in GENERATIVE_TASKS:
            raise APIError(400, f'"{name}" does not support {action}')
        return info

    async def load(self, info: ModelInfo) -> Resolved:
        """Make ``info`` the loaded model (loading it if needed), timing the load.

        Raises:
            APIError: as :meth:`Pipeline.resolve_model` (503 while loading, 500 on failure).
        """
        started = time.perf_counter()
        spec = await self.pipeline.resolve_model(info.id)
        return Resolved(info, spec, time.perf_counter() - started)

    def unload_asked(self, keep_alive: float | str | None) -> bool:
        """Whether an empty request's ``keep_alive`` asks to unload (Ollama: ``0``)."""
        return keep_alive is not None and parse_keep_alive(keep_alive) == 0

    def keep_alive(self, keep_alive: float | str | None, model_id: str) -> None:
        """Apply an empty (load-only) request's ``keep_alive`` to the loaded ``model_id``."""
        engine = self.pipeline.engine.running(model_id)
        if keep_alive is not None and engine is not None:
            engine.set_keep_alive(parse_keep_alive(keep_alive))

    def unload(self, model_id: str) -> None:
        """Unload ``model_id`` if it is loaded: at once when idle, else after its requests
        end (they are never cancelled). Other loaded models stay."""
        engine = self.pipeline.engine.running(model_id)
        if engine is None:
            return
        if not engine.release("keep_alive 0"):
            engine.set_keep_alive(0)

    # ---- model metadata ------------------------------------------------------------------

    async def tags(self) -> dict[str, Any]:
        return {"models": [protocol.tags_entry(info) for info in await self.models.all()]}

    async def ps(self) -> dict[str, Any]:
        """Every loaded (or loading) model, the default first, with when it unloads."""
        entries = []
        for model in self.pipeline.engine.loaded():
            if model.state not in (READY, LOADING):
                continue
            info = await self.models.look_up(model.id)  # listed, not requested
            if info is None:
                continue
            on_gpu = bool(model.device) and not str(model.device).startswith("CPU")
            entries.append(protocol.ps_entry(info, model.context_length, on_gpu, model.expires_at))
        return {"models": entries}

    async def show(self, name: str) -> dict[str, Any]:
        info = await self.find(name)
        return {
            "license": "",
            "modelfile": _modelfile(info),
            "parameters": _parameters(info),
            "template": template(info),
            "details": protocol.details(info),
            "model_info": model_info(info),
            "capabilities": capabilities(info),
            "modified_at": protocol.timestamp(info.modified_at),
        }


def capabilities(info: ModelInfo) -> list[str]:
    """Ollama's capability names, in Ollama's order, from the model's files."""
    if info.task == "embeddings":
        return ["embedding"]
    if info.task in ("rerank", "transcription", "speech"):
        return []  # Ollama has none of them: the model serves /v1/rerank or /v1/audio only
    names = ["completion"]
    if info.tools:
        names.append("tools")
    if info.fim_tokens:
        names.append("insert")
    if info.reasoning:
        names.append("thinking")
    if info.task == "vision":
        names.append("vision")
    return names


def template(info: ModelInfo) -> str:
    """The model's chat template; wrapped in Ollama's ``.Suffix`` branch when FIM works.

    Clients (Continue among them) offer autocomplete only when the template mentions
    ``.Suffix``, so it appears exactly when ``suffix`` is served.
    """
    chat = info.chat_template or "{{ .Prompt }}"
    if not info.fim_tokens:
        return chat
    prefix, suffix, middle = info.fim_tokens
    return (
        f"{{{{- if .Suffix }}}}{prefix}{{{{ .Prompt }}}}{suffix}{{{{ .Suffix }}}}{middle}"
        f"{{{{- else }}}}{chat}{{{{- end }}}}"
    )


def model_info(info: ModelInfo) -> dict[str, Any]:
    """GGUF-style keys; clients read ``<arch>.context_length`` for the window size."""
    arch = info.architecture or "unknown"
    data: dict[str, Any] = {
        "general.architecture": arch,
        "general.basename": info.id,
        "general.parameter_count": info.parameter_count or 0,
        "general.quantization": info.quantization,
    }
    if info.context_length:
        data[f"{arch}.context_length"] = info.context_length
    for key, value in info.shape.items():
        data[f"{arch}.{key}"] = value
    return data


def _parameters(info: ModelInfo) -> str:
    """Modelfile ``PARAMETER`` lines, as Ollama prints them (name padded to 30)."""
    pairs = [("stop", f'"{s}"') for s in info.stop_strings]
    pairs += [(key, str(value)) for key, value in sorted(info.generation_defaults.items())]
    if info.context_length:
        pairs.append(("num_ctx", str(info.context_length)))  # the context it is served with
    return "\n".join(f"{key:<30} {value}" for key, value in pairs)


def _modelfile(info: ModelInfo) -> str:
    return (
        f"# Served by Sidelight from {info.path}\n"
        f"# Models are not created from Modelfiles here; {MODEL_MANAGER_HINT}.\n"
        f"FROM {info.id}\n"
    )


# ---- request options -----------------------------------------------------------------


def sampling(options: protocol.Options | None) -> SamplingParams:
    """Ollama options -> engine sampling (``None`` keeps the model's defaults).

    Clamped as Ollama's sampler clamps them: a negative ``temperature`` is 0 (greedy),
    ``top_p`` and ``min_p`` are held to [0, 1]. Ollama passes any penalty on; GenAI holds
    ``presence_penalty`` and ``frequency_penalty`` to [-2, 2], so they are clamped there.
    """
    if options is None:
        return SamplingParams()
    return sampling_params(
        temperature=_clamp(options.temperature, 0.0, None),
        top_p=_clamp(options.top_p, 0.0, 1.0),
        top_k=options.top_k,  # 0 (or less) disables top-k in Ollama
        min_p=_clamp(options.min_p, 0.0, 1.0),
        seed=options.seed,  # -1: random
        presence_penalty=_clamp(options.presence_penalty, -2.0, 2.0),
        frequency_penalty=_clamp(options.frequency_penalty, -2.0, 2.0),
        repetition_penalty=options.repeat_penalty,
    )


def _clamp(value: float | None, low: float, high: float | None) -> float | None:
    if value is None:
        return None
    value = max(value, low)
    return value if high is None else min(value, high)


def max_tokens(options: protocol.Options | None) -> int | None:
    """``num_predict``: a positive limit, or -1/-2 (unlimited / fill the context) as ``None``.

    As in Ollama it is an upper bound: the engine clips it to the room the prompt leaves in
    the context (``engine.worker.prepare.completion_room``) rather than refusing, so a client that always sends a
    large default (Continue sends 4096) works with a small-context model; the answer then
    ends with ``done_reason: "length"`` when the context fills up.
    """
    if options is None or options.num_predict is None or options.num_predict <= 0:
        return None
    return options.num_predict


def num_ctx(options: protocol.Options | None) -> int | None:
    """``num_ctx``: a smaller context for this request (a larger one than the model is
    served with changes nothing). Ollama cuts a longer prompt silently; Sidelight refuses it
    with a 400 naming both numbers (see ``engine.worker.prepare``).

    Raises:
        APIError: 400 for ``num_ctx`` below 1.
    """
    if options is None or options.num_ctx is None:
        return None
    if options.num_ctx < 1:
        raise APIError(
            400, f"options.num_ctx must be at least 1, got {options.num_ctx}", param="num_ctx"
        )
    return options.num_ctx


def stop(options: protocol.Options | None) -> tuple[str, ...]:
    return tuple(options.stop) if options and options.stop else ()


def log_ignored(path: str, options: protocol.Options | None) -> None:
    """Runner settings (num_gpu, num_thread, mirostat, ...) have no OpenVINO equivalent.

    (``num_ctx`` is used: see :func:`num_ctx`.)
    """
    ignored = options.ignored() if options else []
    if ignored:
        logger.info("%s: ignoring options %s", path, ", ".join(sorted(ignored)))
