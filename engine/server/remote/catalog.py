"""The remotes' models, kept current: the registry file watched, each remote's
``GET /v1/models`` read in the background, every model listed as ``MODEL@NAME``.

:class:`RemoteCatalog` is what the pipeline and the model listings ask: :meth:`target`
(which remote model a request names), :meth:`infos` (every remote model as a
:class:`ModelInfo`, ``remote`` set) and :meth:`statuses` (``/health``: each remote's last
refresh). A remote's listing is bounded: a timeout (the connect setting, and at most
``LIST_TIMEOUT_SECONDS`` to read), a body of at most ``MAX_LIST_BYTES``, at most
``Settings.remote_max_models`` models (the rest left out and counted); a body that is not
an OpenAI model list is a failed refresh with its reason, and the remote's last good list
is kept.

Threading: one daemon thread (``remote-refresh``) reads the registry (when its file
changes) and the listings; everything it publishes is swapped under one lock, and readers
on any thread (the server's loop, the desktop) only read those snapshots.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import httpx

from engine.models import ModelSpec, ModelTask
from engine.remotes.registry import (
    Remote,
    RemoteError,
    load_remotes,
    remotes_path,
    split_model,
)
from engine.server.model_info import ModelInfo
from engine.server.remote.backend import RemoteModel, Timeouts
from engine.server.remote.wire import error_text
from engine.settings import Settings

logger = logging.getLogger(__name__)

LIST_TIMEOUT_SECONDS = 10.0
MAX_LIST_BYTES = 8 * 1024 * 1024
MAX_ID_CHARS = 256
TICK_SECONDS = 1.0  # how often the registry file is looked at
REMOTE_FORMAT = "remote"  # ModelSpec.format / ModelInfo.format of a remote model
_TASKS: tuple[ModelTask, ...] = ("chat", "embeddings", "rerank")

RefreshState = Literal["pending", "ok", "failed"]


@dataclass(frozen=True)
class Listed:
    """One model a remote lists: its own id and what its card says."""

    model: str
    task: ModelTask = "chat"
    context_length: int | None = None
    owned_by: str | None = None


@dataclass(frozen=True)
class RemoteState:
    """A remote and its last refresh (what ``/health`` shows; never the key)."""

    remote: Remote
    state: RefreshState = "pending"
    models: tuple[Listed, ...] = ()
    left_out: int = 0  # models past the cap
    error: str | None = None
    refreshed_at: datetime | None = None
    changed_at: datetime | None = None  # when its list last changed (Ollama's modified_at)
    next_at: float = 0.0  # time.monotonic() of the next refresh

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.remote.public(),
            "state": self.state,
            "models": len(self.models),
            "left_out": self.left_out,
            "error": self.error,
            "refreshed_at": (
                self.refreshed_at.isoformat(timespec="seconds") if self.refreshed_at else None
            ),
        }


@dataclass
class _Snapshot:
    remotes: dict[str, RemoteState] = field(default_factory=dict)
    registry_error: str | None = None


class RemoteCatalog:
    """The registered remotes and their models (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self._path = remotes_path(settings.paths.config_dir)
        self._timeouts = Timeouts(
            settings.remote_connect_timeout_seconds, settings.remote_read_timeout_seconds
        )
        self._refresh = settings.remote_refresh_seconds
        self._cap = settings.remote_max_models
        self._lock = threading.Lock()
        self._snapshot = _Snapshot()
        self._file_key: tuple[int, int] | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def path(self) -> Path:
        return self._path

    # ---- the refresher -----------------------------------------------------------------

    def start(self) -> None:
        """Start the refresher thread (idempotent)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="remote-refresh", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the refresher (it ends after the listing it may be reading, bounded)."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(LIST_TIMEOUT_SECONDS + 5)

    def refresh_now(self) -> None:
        """Read the registry and every remote's listing now (blocks; any thread)."""
        self._read_registry(force=True)
        for name in list(self._snapshot.remotes):
            self._refresh_one(name)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._read_registry()
                now = time.monotonic()
                due = [n for n, s in self._snapshot.remotes.items() if s.next_at <= now]
                for name in due:
                    if self._stop.is_set():
                        return
                    self._refresh_one(name)
            except Exception:  # a bug here must not end the refresher for good
                logger.exception("refreshing the remotes failed")
            self._wake.wait(min(TICK_SECONDS, self._refresh))
            self._wake.clear()

    def _read_registry(self, *, force: bool = False) -> None:
        try:
            stat = self._path.stat()
            key: tuple[int, int] | None = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            key = None
        if key == self._file_key and not force:
            return
        self._file_key = key
        try:
            remotes = load_remotes(self._path)
        except RemoteError as exc:
            logger.warning("remotes: %s (the last good list is kept)", exc)
            with self._lock:
                self._snapshot = replace(self._snapshot, registry_error=str(exc))
            return
        with self._lock:
            old = self._snapshot.remotes
            states = {}
            for remote in remotes:
                kept = old.get(remote.name)
                # A changed URL or key is a new remote: its old list is not its list.
                states[remote.name] = (
                    kept if kept is not None and kept.remote == remote else RemoteState(remote)
                )
            self._snapshot = _Snapshot(states, None)
        logger.info("remotes: %s", ", ".join(states) or "none")

    def _refresh_one(self, name: str) -> None:
        with self._lock:
            state = self._snapshot.remotes.get(name)
        if state is None:
            return
        remote = state.remote
        try:
            listed, left_out, skipped = self._list(remote)
        except _ListingFailed as exc:
            if state.state != "failed" or state.error != str(exc):  # once per new failure
                logger.warning("remote %s: listing failed: %s", remote.name, exc)
            new = replace(state, state="failed", error=str(exc))
        else:
            note = f"{skipped} entries without a usable id were left out" if skipped else None
            if left_out:
                logger.warning(
                    "remote %s lists %d models; the first %d are served",
                    remote.name,
                    len(listed) + left_out,
                    len(listed),
                )
            now = datetime.now(timezone.utc)
            models = tuple(listed)
            new = replace(
                state,
                state="ok",
                models=models,
                left_out=left_out,
                error=note,
                refreshed_at=now,
                changed_at=state.changed_at if models == state.models else now,
            )
        new = replace(new, next_at=time.monotonic() + self._refresh)
        with self._lock:
            current = self._snapshot.remotes.get(name)
            if current is not None and current.remote == remote:  # not replaced meanwhile
                self._snapshot.remotes = {**self._snapshot.remotes, name: new}

    def _list(self, remote: Remote) -> tuple[list[Listed], int, int]:
        timeout = httpx.Timeout(
            min(LIST_TIMEOUT_SECONDS, self._timeouts.read), connect=self._timeouts.connect
        )
        try:
            with (
                httpx.Client(
                    base_url=remote.api_base,
                    headers=remote.headers(),
                    timeout=timeout,
                    follow_redirects=False,
                    trust_env=False,
                ) as http,
                http.stream("GET", "/models") as response,
            ):
                raw = bytearray()
                for piece in response.iter_bytes():
                    raw += piece
                    if len(raw) > MAX_LIST_BYTES:
                        raise _ListingFailed(f"the model list is over {MAX_LIST_BYTES} bytes")
                status = response.status_code
        except httpx.HTTPError as exc:
            raise _ListingFailed(f"{type(exc).__name__}: {exc}") from exc
        if status != 200:
            message, _, _ = error_text(bytes(raw))
            raise _ListingFailed(f"GET /v1/models answered {status}: {message}")
        return _parse_listing(bytes(raw), self._cap)

    # ---- what the server reads ---------------------------------------------------------

    def remotes(self) -> list[Remote]:
        with self._lock:
            return [s.remote for s in self._snapshot.remotes.values()]

    def statuses(self) -> dict[str, Any]:
        """``/health``'s ``remotes``: each remote's last refresh, and a registry error."""
        with self._lock:
            snapshot = self._snapshot
        body: dict[str, Any] = {"remotes": [s.to_dict() for s in snapshot.remotes.values()]}
        if snapshot.registry_error:
            body["registry_error"] = snapshot.registry_error
        return body

    def target(self, name: str) -> RemoteModel | None:
        """The remote model ``name`` names (``MODEL@NAME``, any case) when NAME is a
        registered remote; a model it does not list (yet) is still sent there, and the
        remote answers for it."""
        parts = split_model(name)
        if parts is None:
            return None
        model, remote_name = parts
        with self._lock:
            state = self._snapshot.remotes.get(remote_name)
        if state is None:
            return None
        wanted = model.lower()
        listed = next((m for m in state.models if m.model.lower() == wanted), None)
        spelled = listed.model if listed is not None else model
        return RemoteModel(
            state.remote, spelled, _spec(state.remote, listed or Listed(spelled)), self._timeouts
        )

    def infos(self) -> list[ModelInfo]:
        """Every remote model, remote by remote in the registry's order."""
        with self._lock:
            states = list(self._snapshot.remotes.values())
        return [_info(s, m) for s in states for m in s.models]

    def find(self, name: str) -> ModelInfo | None:
        """The listed remote model ``name`` names (any case), or None."""
        wanted = name.strip().lower()
        return next((i for i in self.infos() if i.id.lower() == wanted), None)


class _ListingFailed(Exception):
    pass


def _parse_listing(raw: bytes, cap: int) -> tuple[list[Listed], int, int]:
    """(models kept, models past ``cap``, entries skipped) of an OpenAI ``/v1/models`` body.

    Raises:
        _ListingFailed: not JSON, or not ``{"data": [...]}``.
    """
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _ListingFailed(f"the model list is not JSON ({exc})") from exc
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise _ListingFailed("the model list is not OpenAI's {'data': [...]}")
    listed: list[Listed] = []
    seen: set[str] = set()
    skipped = left_out = 0
    for entry in entries:
        model = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(model, str) or not _usable_id(model) or model.lower() in seen:
            skipped += 1
            continue
        if len(listed) >= cap:
            left_out += 1
            continue
        seen.add(model.lower())
        listed.append(_listed(model, entry))
    return listed, left_out, skipped


def _usable_id(model: str) -> bool:
    return 0 < len(model) <= MAX_ID_CHARS and model.isprintable() and model.strip() == model


def _listed(model: str, entry: dict[str, Any]) -> Listed:
    """A listing entry's card: Sidelight's and LM Studio's ``context_length``, vLLM's
    ``max_model_len``, llama-server's ``meta.n_ctx`` (the context it serves)."""
    task = entry.get("task")
    meta = entry.get("meta")
    served = meta.get("n_ctx") if isinstance(meta, dict) else None
    context = entry.get("context_length", entry.get("max_model_len", served))
    owner = entry.get("owned_by")
    return Listed(
        model,
        task if task in _TASKS else "chat",
        context
        if isinstance(context, int) and not isinstance(context, bool) and context > 0
        else None,
        owner if isinstance(owner, str) else None,
    )


def _spec(remote: Remote, listed: Listed) -> ModelSpec:
    return ModelSpec(
        id=f"{listed.model}@{remote.name}",
        path=Path(f"@{remote.name}"),  # nothing on disk: no file check ever runs on it
        format=REMOTE_FORMAT,
        context_length=listed.context_length,
        task=listed.task,
    )


def _info(state: RemoteState, listed: Listed) -> ModelInfo:
    spec = _spec(state.remote, listed)
    return ModelInfo(
        spec=spec,
        id=spec.id,
        path=spec.path,
        format=REMOTE_FORMAT,
        size_bytes=0,
        modified_at=state.changed_at or datetime.now(timezone.utc),
        context_length=listed.context_length,
        task=listed.task,
        publisher=state.remote.name,
        tools=listed.task == "chat",  # passed through: the remote decides
        remote=state.remote.name,
    )
