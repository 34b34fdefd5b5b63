"""Stored responses (``store: true``): what ``previous_response_id`` and ``GET`` read back.

One JSON file per response, ``<id>.json`` in ``paths.responses_dir``, written atomically
(a temporary file, then a rename) so a crash never leaves half a response. Each file holds
the response object and the conversation's input items up to it, so a conversation
continues even after its earlier responses expired.

Bounds: responses older than ``max_age_seconds`` are gone (30 days by default, as OpenAI
keeps them); past ``max_count`` files or ``max_bytes`` in all, the oldest go first. Ids are
checked against the shape Sidelight gives them before any path is built, so an id is never
a path; an unknown, malformed or expired id is simply not found.

Threading: every method reads or writes files, so call them off the event loop
(``asyncio.to_thread``); a lock keeps the index of files consistent between threads.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

RESPONSE_ID = re.compile(r"resp_[0-9a-f]{48}")
DEFAULT_MAX_AGE_SECONDS = 30 * 24 * 3600.0
DEFAULT_MAX_COUNT = 10_000
DEFAULT_MAX_BYTES = 512 * 1024 * 1024
_STALE_TEMP_SECONDS = 3600.0
_FORMAT = 1


@dataclass(frozen=True)
class StoredResponse:
    """A response object and the input items of its conversation up to it."""

    response: dict[str, Any]
    context: list[dict[str, Any]]

    @property
    def id(self) -> str:
        return str(self.response["id"])

    def history(self) -> list[dict[str, Any]]:
        """The items a response continuing this one starts from: its input, then its output."""
        return [*self.context, *self.response.get("output", [])]


@dataclass
class _Entry:
    mtime: float
    size: int


class ResponseStore:
    """Responses on disk, bounded in age, count and total size (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        *,
        max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
        max_count: int = DEFAULT_MAX_COUNT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = root
        self.max_age_seconds = max_age_seconds
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._index: dict[str, _Entry] | None = None  # read from the folder on first use

    def save(self, stored: StoredResponse) -> bool:
        """Write ``stored``; ``False`` (logged) when the disk refuses it.

        A response larger than the whole size bound is not kept.
        """
        if not RESPONSE_ID.fullmatch(stored.id):
            raise ValueError(f"not a response id: {stored.id!r}")
        data = json.dumps(
            {"format": _FORMAT, "response": stored.response, "context": stored.context},
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode("utf-8")
        if len(data) > self.max_bytes:
            logger.warning("response %s (%d bytes) is too large to store", stored.id, len(data))
            return False
        with self._lock:
            index = self._entries()
            try:
                mtime = self._write(stored.id, data)
            except OSError as exc:
                logger.warning("could not store response %s: %s", stored.id, exc)
                return False
            index[stored.id] = _Entry(mtime, len(data))
            self._prune(index)
        return True

    def load(self, response_id: str) -> StoredResponse | None:
        """The stored response, or ``None`` for an unknown, malformed or expired id."""
        if not RESPONSE_ID.fullmatch(response_id):
            return None
        with self._lock:
            entry = self._entries().get(response_id)
            if entry is None:
                return None
            if self._expired(entry):
                self._remove(response_id)
                return None
            try:
                data = json.loads(self._path(response_id).read_bytes())
                stored = StoredResponse(data["response"], list(data["context"]))
                if stored.id != response_id or not isinstance(stored.response, dict):
                    raise ValueError("the id inside does not match the file name")
            except FileNotFoundError:
                self._entries().pop(response_id, None)
                return None
            except (OSError, ValueError, KeyError, TypeError) as exc:
                logger.warning(
                    "stored response %s is unreadable (%s); removing it", response_id, exc
                )
                self._remove(response_id)
                return None
        return stored

    def delete(self, response_id: str) -> bool:
        """Remove a stored response; ``False`` when there was none by that id."""
        if not RESPONSE_ID.fullmatch(response_id):
            return False
        with self._lock:
            if response_id not in self._entries():
                return False
            self._remove(response_id)
        return True

    # ---- under the lock ------------------------------------------------------------------

    def _entries(self) -> dict[str, _Entry]:
        if self._index is None:
            self._index = self._scan()
        return self._index

    def _scan(self) -> dict[str, _Entry]:
        """Every stored response in the folder; temporary files left by a crash are removed."""
        index: dict[str, _Entry] = {}
        try:
            listing = list(os.scandir(self.root))
        except FileNotFoundError:
            return index
        except OSError as exc:
            logger.warning("cannot read the response store %s: %s", self.root, exc)
            return index
        for entry in listing:
            try:
                info = entry.stat()
            except OSError:
                continue
            stem = entry.name.removesuffix(".json")
            if entry.name.endswith(".json") and RESPONSE_ID.fullmatch(stem):
                index[stem] = _Entry(info.st_mtime, info.st_size)
            elif (
                entry.name.endswith(".tmp") and info.st_mtime < self._clock() - _STALE_TEMP_SECONDS
            ):
                _unlink(Path(entry.path))
        return index

    def _write(self, response_id: str, data: bytes) -> float:
        """Write the file atomically; its modification time (this store's clock) is returned."""
        self.root.mkdir(parents=True, exist_ok=True)
        temp = self.root / f".{response_id}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with temp.open("wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            now = self._clock()
            os.utime(temp, (now, now))  # the age the bounds read, on this store's clock
            os.replace(temp, self._path(response_id))
        except BaseException:
            _unlink(temp)
            raise
        return now

    def _prune(self, index: dict[str, _Entry]) -> None:
        for response_id in [rid for rid, entry in index.items() if self._expired(entry)]:
            self._remove(response_id)
        total = sum(entry.size for entry in index.values())
        oldest_first = sorted(index, key=lambda rid: index[rid].mtime)
        for response_id in oldest_first:
            if len(index) <= self.max_count and total <= self.max_bytes:
                break
            total -= index[response_id].size
            self._remove(response_id)

    def _expired(self, entry: _Entry) -> bool:
        return entry.mtime < self._clock() - self.max_age_seconds

    def _remove(self, response_id: str) -> None:
        self._entries().pop(response_id, None)
        _unlink(self._path(response_id))

    def _path(self, response_id: str) -> Path:
        return self.root / f"{response_id}.json"


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        logger.warning("could not remove %s: %s", path, exc)
