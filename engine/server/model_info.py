"""What the Ollama and LM Studio surfaces say about a model: size, shape, template, abilities.

Their clients decide what to offer from this: Copilot hides a model in agent mode unless
``/api/show`` lists ``tools``; Zed reads the context length from ``model_info``; Continue
enables autocomplete when the template mentions ``.Suffix``. So the facts come from the
model's own files (``config.json``, the chat template, the tokenizer, a GGUF header), never
from guesses about its name.

:class:`ModelDirectory` lists the models a request may name (the loaded one, models loaded
from a path this session, and the store) and describes each as a :class:`ModelInfo`.
Reading files happens on a worker thread (``asyncio.to_thread``) and is cached per file
modification time, so a client polling ``/api/tags`` never blocks the event loop.

Threading: the cache is guarded by a lock; every public coroutine runs on the server loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from engine.gguf import GGUFError, read_metadata
from engine.models import ModelError, ModelSpec, ModelTask, read_chat_template, read_json
from engine.server.monitor import note_model
from engine.store import ModelStore, StoredModel, StoreError
from engine.store.facts import folder_size, gguf_facts, ir_facts
from engine.supervisor.states import READY, EngineStatus, LoadedModel
from engine.worker.prepare import FIM_TOKENS

logger = logging.getLogger(__name__)

_TURN_ENDS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "</s>")
_GENERATION_DEFAULTS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
_GGUF_TOKENS = "tokenizer.ggml.tokens"


@dataclass(frozen=True)
class ModelInfo:
    """One model as the Ollama and LM Studio APIs describe it."""

    spec: ModelSpec
    id: str
    path: Path
    format: str  # "ir" or "gguf"
    size_bytes: int
    modified_at: datetime
    architecture: str | None = None
    context_length: int | None = None
    weights: str | None = None  # "int4", "fp16", "Q4_K_M", ...
    task: ModelTask = "chat"
    publisher: str = "local"
    tools: bool = False
    reasoning: bool = False
    fim_tokens: tuple[str, str, str] | None = None
    chat_template: str | None = None
    parameter_count: int | None = None
    shape: dict[str, int] = field(default_factory=dict)  # embedding_length, block_count, ...
    generation_defaults: dict[str, Any] = field(default_factory=dict)
    stop_strings: tuple[str, ...] = ()
    # The remote server serving it (``MODEL@NAME``; ``engine.server.remote``), else None.
    remote: str | None = None

    @property
    def digest(self) -> str:
        """A stable stand-in for Ollama's manifest digest: changes when the files change."""
        key = f"{self.id}\0{self.path}\0{self.size_bytes}\0{self.modified_at.isoformat()}"
        return hashlib.sha256(key.encode()).hexdigest()

    @property
    def parameter_size(self) -> str:
        """Ollama's human form: ``494.03M``, ``7.6B``."""
        n = self.parameter_count
        if not n:
            return "unknown"
        for scale, unit, digits in ((1e9, "B", 1), (1e6, "M", 2), (1e3, "K", 2)):
            if n >= scale:
                return f"{n / scale:.{digits}f}".rstrip("0").rstrip(".") + unit
        return str(n)

    @property
    def quantization(self) -> str:
        return self.weights.upper() if self.weights else "unknown"


class _Worker(Protocol):
    def status(self) -> EngineStatus: ...


class StatusSource(Protocol):
    """What the directory asks of the engine (:class:`engine.server.pipeline.EngineLike`
    has it): the default model's status, the loaded models and each one's worker."""

    def status(self) -> EngineStatus: ...

    def loaded(self) -> list[LoadedModel]: ...

    def running(self, model_id: str) -> _Worker | None: ...


class RemoteListing(Protocol):
    """The remote servers' models (:class:`engine.server.remote.RemoteCatalog`)."""

    def infos(self) -> list[ModelInfo]: ...

    def find(self, name: str) -> ModelInfo | None: ...


class ModelDirectory:
    """The models a request may name, described from their files (cached per mtime), then
    the remote servers' models (``MODEL@NAME``) when ``remotes`` is given."""

    def __init__(
        self,
        engine: StatusSource,
        store: ModelStore | None,
        remotes: RemoteListing | None = None,
    ) -> None:
        self.engine = engine
        self.store = store
        self.remotes = remotes
        # Every model loaded this session, so one loaded from a path stays selectable by id.
        self.seen: dict[str, ModelSpec] = {}
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], tuple[float, ModelInfo]] = {}

    def status(self) -> EngineStatus:
        """The engine's status, noting its model in :attr:`seen`."""
        status = self.engine.status()
        if status.model is not None:
            self.seen.setdefault(status.model.id, status.model)
        return status

    def loaded_contexts(self) -> dict[str, int | None]:
        """The models ready to answer now (each in its own worker) and the context each is
        served with (None: unknown)."""
        ready = {m.id: m.context_length for m in self.engine.loaded() if m.state == READY}
        status = self.status()
        if status.state == READY and status.model is not None:
            ready.setdefault(status.model.id, status.context_length)
        return ready

    def canonical(self, name: str) -> str:
        """The id ``name`` stands for: ids ignore case and surrounding spaces.

        A model seen this session keeps its own spelling (one loaded from a path may have
        capitals); any other name is the store's form, lowercase.
        """
        wanted = name.strip().lower()
        for known in self.seen:
            if known.lower() == wanted:
                return known
        return wanted

    async def all(self) -> list[ModelInfo]:
        """The loaded model first, then models loaded from a path, then the store."""
        return await asyncio.to_thread(self._list_sync, self.status())

    async def find(self, name: str) -> ModelInfo | None:
        """The model called ``name`` (in any case, spaces around it dropped), or ``None``;
        the request log notes it as the model the request asked for."""
        note_model(requested=name)  # the request log shows what was asked, even if unknown
        return await self.look_up(name)

    async def look_up(self, name: str) -> ModelInfo | None:
        """As :meth:`find`, for a listing (``/api/ps``): the request asked for no model, so
        the request log notes none (else it shows each listed model as requested)."""
        return await asyncio.to_thread(self._find_sync, name, self.status())

    def _list_sync(self, status: EngineStatus) -> list[ModelInfo]:
        infos: dict[str, ModelInfo] = {}
        for stored in self._stored():
            info = self._describe_stored(stored)
            if info is not None:
                infos[info.id] = info
        for spec in self.seen.values():
            if spec.id not in infos:
                info = self._describe_spec(spec, None)
                if info is not None:
                    infos[info.id] = info
        loaded = {model.id for model in self.engine.loaded()}
        if status.model is not None:
            loaded.add(status.model.id)
        ordered = sorted(infos.values(), key=lambda i: (i.id not in loaded, i.id))
        local = [_live(info, self._status_of(info.id, status)) for info in ordered]
        return local + (self.remotes.infos() if self.remotes is not None else [])

    def _status_of(self, model_id: str, default: EngineStatus) -> EngineStatus:
        """The status of the worker serving ``model_id`` (the default's when none does)."""
        engine = self.engine.running(model_id)
        return engine.status() if engine is not None else default

    def _find_sync(self, name: str, status: EngineStatus) -> ModelInfo | None:
        name = self.canonical(name)
        info: ModelInfo | None = None
        if self.store is not None:
            # Unknown, malformed or path-like ids are all "not found" to a client.
            with contextlib.suppress(StoreError):
                info = self._describe_stored(self.store.get(name))
        spec = self.seen.get(name)
        if info is None and spec is not None:
            info = self._describe_spec(spec, None)
        if info is None and self.remotes is not None:
            return self.remotes.find(name)
        return _live(info, self._status_of(info.id, status)) if info is not None else None

    def _stored(self) -> list[StoredModel]:
        return self.store.list() if self.store is not None else []

    def _describe_stored(self, stored: StoredModel) -> ModelInfo | None:
        try:
            spec = stored.spec()
        except ModelError as exc:
            logger.warning("cannot describe %s: %s", stored.id, exc)
            return None
        return self._describe_spec(spec, stored)

    def _describe_spec(self, spec: ModelSpec, stored: StoredModel | None) -> ModelInfo | None:
        try:
            mtime = spec.path.stat().st_mtime
        except OSError:
            return None
        key = (spec.id, str(spec.path))
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        try:
            info = describe(spec, stored)
        except (OSError, GGUFError, StoreError) as exc:
            logger.warning("cannot describe %s: %s", spec.id, exc)
            return None
        with self._lock:
            self._cache[key] = (mtime, info)
        return info


def _live(info: ModelInfo, status: EngineStatus) -> ModelInfo:
    """For the loaded model, what the engine measured wins over file guesses: its
    tokenizer's FIM tokens, and the context it is served with (what fits the KV budget)."""
    if status.state != READY or status.model is None or status.model.id != info.id:
        return info
    context = status.context_length or info.context_length
    return replace(info, fim_tokens=status.fim_tokens, context_length=context)


def describe(spec: ModelSpec, stored: StoredModel | None = None) -> ModelInfo:
    """Read what the API surfaces need about ``spec`` from its files (blocking).

    Raises:
        OSError, GGUFError: the files cannot be read.
    """
    info = _describe_gguf(spec) if spec.format == "gguf" else _describe_ir(spec)
    if stored is None:
        return info
    manifest = stored.manifest
    capabilities = manifest.capabilities
    publisher = manifest.source.repo.split("/")[0] if manifest.source.repo else info.publisher
    return replace(
        info,
        size_bytes=manifest.size_bytes or info.size_bytes,
        modified_at=_parse_time(manifest.added_at) or info.modified_at,
        weights=manifest.weights or info.weights,
        context_length=manifest.context_length or info.context_length,
        task=manifest.task,
        publisher=publisher,
        tools=capabilities.get("tools", info.tools),
        reasoning=capabilities.get("reasoning", info.reasoning),
    )


def _describe_ir(spec: ModelSpec) -> ModelInfo:
    folder = spec.path
    config = read_json(folder / "config.json")
    facts = ir_facts(folder)
    template = read_chat_template(folder)
    text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
    dims = text_config or config
    shape = {
        "embedding_length": _int(dims, "hidden_size", "n_embd", "d_model"),
        "block_count": _int(dims, "num_hidden_layers", "n_layer", "num_layers"),
        "feed_forward_length": _int(dims, "intermediate_size", "n_inner"),
        "attention.head_count": _int(dims, "num_attention_heads", "n_head"),
        "attention.head_count_kv": _int(dims, "num_key_value_heads"),
        "vocab_size": _int(dims, "vocab_size"),
    }
    shape = {k: v for k, v in shape.items() if v}
    generation = read_json(folder / "generation_config.json")
    tokens = _ir_special_tokens(folder)
    return ModelInfo(
        spec=spec,
        id=spec.id,
        path=spec.path,
        format="ir",
        size_bytes=folder_size(folder),
        modified_at=_mtime(folder),
        architecture=spec.architecture,
        context_length=spec.context_length,
        weights=facts.weights,
        task=facts.task,
        tools=facts.capabilities.get("tools", False),
        reasoning=facts.capabilities.get("reasoning", False),
        fim_tokens=_fim(tokens),
        chat_template=template,
        parameter_count=_parameter_count(shape, bool(dims.get("tie_word_embeddings", False))),
        shape=shape,
        generation_defaults={k: generation[k] for k in _GENERATION_DEFAULTS if k in generation},
        stop_strings=_turn_ends(template),
    )


def _describe_gguf(spec: ModelSpec) -> ModelInfo:
    meta = read_metadata(spec.path, keep_arrays=(_GGUF_TOKENS,))
    tokens = meta.get(_GGUF_TOKENS)
    vocab = {t for t in tokens if isinstance(t, str)} if isinstance(tokens, list) else set()
    arch = str(meta.get("general.architecture", spec.architecture or "unknown"))
    facts = gguf_facts(spec.path)
    shape = {
        "embedding_length": meta.get(f"{arch}.embedding_length"),
        "block_count": meta.get(f"{arch}.block_count"),
        "feed_forward_length": meta.get(f"{arch}.feed_forward_length"),
        "attention.head_count": meta.get(f"{arch}.attention.head_count"),
        "attention.head_count_kv": meta.get(f"{arch}.attention.head_count_kv"),
        "vocab_size": len(tokens) if isinstance(tokens, list) else None,
    }
    clean = {k: int(v) for k, v in shape.items() if isinstance(v, int) and v > 0}
    fim_ids = ("fim_pre_token_id", "fim_suf_token_id", "fim_mid_token_id")
    # llama.cpp's converter does not write these ids for Qwen2-family models (llama.cpp's
    # loader finds FIM tokens by their text), so the vocabulary is searched the same way.
    fim_tokens = _fim(vocab)
    if fim_tokens is None and all(f"tokenizer.ggml.{k}" in meta for k in fim_ids):
        fim_tokens = FIM_TOKENS[0]  # named by id only; the prompt spelling is the usual one
    template = meta.get("tokenizer.chat_template")
    return ModelInfo(
        spec=spec,
        id=spec.id,
        path=spec.path,
        format="gguf",
        size_bytes=spec.path.stat().st_size,
        modified_at=_mtime(spec.path),
        architecture=arch,
        context_length=spec.context_length,
        weights=facts.weights,
        publisher=str(meta.get("general.organization") or "local"),
        tools=facts.capabilities.get("tools", False),
        reasoning=facts.capabilities.get("reasoning", False),
        fim_tokens=fim_tokens,
        chat_template=template if isinstance(template, str) else None,
        stop_strings=_turn_ends(template if isinstance(template, str) else None),
        parameter_count=_parameter_count(clean, tied=True),
        shape=clean,
    )


def _parameter_count(shape: dict[str, int], tied: bool) -> int | None:
    """Estimate a decoder's parameters from its shape (attention, gated MLP, embeddings)."""
    try:
        hidden, layers = shape["embedding_length"], shape["block_count"]
        vocab, heads = shape["vocab_size"], shape["attention.head_count"]
    except KeyError:
        return None
    kv_heads = shape.get("attention.head_count_kv", heads)
    ffn = shape.get("feed_forward_length", 4 * hidden)
    kv_dim = hidden // heads * kv_heads
    per_layer = 2 * hidden * hidden + 2 * hidden * kv_dim + 3 * hidden * ffn + 2 * hidden
    embeddings = vocab * hidden * (1 if tied else 2)
    return layers * per_layer + embeddings + hidden


def _turn_ends(template: str | None) -> tuple[str, ...]:
    """The end-of-turn markers a chat template writes (Ollama lists them as ``stop``)."""
    return tuple(t for t in _TURN_ENDS if template and t in template)


def _fim(tokens: set[str]) -> tuple[str, str, str] | None:
    for triple in FIM_TOKENS:
        if all(t in tokens for t in triple):
            return triple
    return None


def _ir_special_tokens(folder: Path) -> set[str]:
    """Added (special) tokens from tokenizer_config.json or tokenizer.json."""
    tokens: set[str] = set()
    decoder = read_json(folder / "tokenizer_config.json").get("added_tokens_decoder")
    if isinstance(decoder, dict):
        tokens.update(str(t.get("content")) for t in decoder.values() if isinstance(t, dict))
    if not tokens:
        added = read_json(folder / "tokenizer.json").get("added_tokens")
        if isinstance(added, list):
            tokens.update(str(t.get("content")) for t in added if isinstance(t, dict))
    return tokens


def _int(config: dict[str, Any], *keys: str) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return 0


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)


def _parse_time(text: str) -> datetime | None:
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
