"""Stored responses (``store: true``): what ``previous_response_id`` and ``GET`` read back.

One JSON file per response, ``<id>.json`` in ``paths.responses_dir``, written atomically
(a temporary file, then a rename) so a crash never leaves half a response. Each file holds
the response object and the conversation's input items up to it, so a conversation
continues even after its earlier responses expired.

Owners: with an API key set, each response belongs to that key (:func:`owner_of`, a hash:
the key itself is never written) and lives in a folder of its own, ``<owner>/<id>.json``; a
response is found only by its owner, so another key (the key changed) gets a 404. Without a
key every client on this machine is one owner, and responses sit in the folder itself.

Bounds: responses older than ``max_age_seconds`` are gone (30 days by default, as OpenAI
keeps them); one response is at most ``max_response_bytes`` (the serving side refuses a
request whose response would be larger, with a 400 naming the field); past ``max_count``
files or ``max_bytes`` in all, the owner holding the largest share of the store loses its
oldest first. So a client that writes much evicts its own responses, and an owner holding
no more than the writer never loses one to it. Ids are checked against the shape Sidelight
gives them before any path is built, so an id is never a path; an unknown, malformed or
expired id, or one another owner stored, is simply not found.

Threading: every method reads or writes files, so call them off the event loop
(``asyncio.to_thread``); a lock keeps the index of files consistent between threads.
"""

from __future__ import annotations

import hashlib
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
OWNER = re.compile(r"[0-9a-f]{32}")
DEFAULT_MAX_AGE_SECONDS = 30 * 24 * 3600.0
DEFAULT_MAX_COUNT = 10_000
DEFAULT_MAX_BYTES = 512 * 1024 * 1024
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
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


def owner_of(api_key: str | None) -> str | None:
    """The owner of the responses created with ``api_key`` (``None``: no key, one owner).

    A hash, so the store's folder names never reveal the key.
    """
    if not api_key:
        return None
    digest = hashlib.sha256(b"sidelight-responses-owner\0" + api_key.encode("utf-8"))
    return digest.hexdigest()[:32]


@dataclass
class _Entry:
    mtime: float
    size: int
    owner: str | None = None


class ResponseStore:
    """Responses on disk, bounded in age, count and total size (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        *,
        max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
        max_count: int = DEFAULT_MAX_COUNT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = root
        self.max_age_seconds = max_age_seconds
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.max_response_bytes = min(max_response_bytes, max_bytes)
        self._clock = clock
        self._lock = threading.Lock()
        self._index: dict[str, _Entry] | None = None  # read from the folder on first use

    def save(self, stored: StoredResponse, owner: str | None = None) -> bool:
        """Write ``stored`` for ``owner``; ``False`` (logged) when the disk refuses it.

        A response larger than ``max_response_bytes`` is not kept (the serving side refuses
        such a request before it runs).
        """
        if not RESPONSE_ID.fullmatch(stored.id):
            raise ValueError(f"not a response id: {stored.id!r}")
        _check_owner(owner)
        data = encode(stored)
        if len(data) > self.max_response_bytes:
            logger.warning("response %s (%d bytes) is too large to store", stored.id, len(data))
            return False
        with self._lock:
            index = self._entries()
            try:
                mtime = self._write(stored.id, owner, data)
            except OSError as exc:
                logger.warning("could not store response %s: %s", stored.id, exc)
                return False
            index[stored.id] = _Entry(mtime, len(data), owner)
            self._prune(index, owner)
        return True

    def load(self, response_id: str, owner: str | None = None) -> StoredResponse | None:
        """The stored response, or ``None`` for an unknown, malformed or expired id, or one
        another owner stored."""
        if not RESPONSE_ID.fullmatch(response_id):
            return None
        _check_owner(owner)
        with self._lock:
            entry = self._entries().get(response_id)
            if entry is None or entry.owner != owner:
                return None
            if self._expired(entry):
                self._remove(response_id)
                return None
            try:
                data = json.loads(self._path(response_id, owner).read_bytes())
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

    def delete(self, response_id: str, owner: str | None = None) -> bool:
        """Remove a stored response; ``False`` when ``owner`` has none by that id."""
        if not RESPONSE_ID.fullmatch(response_id):
            return False
        _check_owner(owner)
        with self._lock:
            entry = self._entries().get(response_id)
            if entry is None or entry.owner != owner:
                return False
            self._remove(response_id)
        return True

    def usage(self, owner: str | None = None) -> tuple[int, int]:
        """How many responses ``owner`` has stored, and their bytes."""
        with self._lock:
            mine = [e for e in self._entries().values() if e.owner == owner]
        return len(mine), sum(e.size for e in mine)

    # ---- under the lock ------------------------------------------------------------------

    def _entries(self) -> dict[str, _Entry]:
        if self._index is None:
            self._index = self._scan()
        return self._index

    def _scan(self) -> dict[str, _Entry]:
        """Every stored response in the folder and its owners' folders; temporary files
        left by a crash are removed."""
        index: dict[str, _Entry] = {}
        self._scan_folder(self.root, None, index)
        try:
            owners = [e.name for e in os.scandir(self.root) if e.is_dir(follow_symlinks=False)]
        except OSError:
            owners = []
        for owner in owners:
            if OWNER.fullmatch(owner):
                self._scan_folder(self.root / owner, owner, index)
        return index

    def _scan_folder(self, folder: Path, owner: str | None, index: dict[str, _Entry]) -> None:
        try:
            listing = list(os.scandir(folder))
        except FileNotFoundError:
            return
        except OSError as exc:
            logger.warning("cannot read the response store %s: %s", folder, exc)
            return
        for entry in listing:
            if not entry.is_file(follow_symlinks=False):
                continue
            try:
                info = entry.stat()
            except OSError:
                continue
            stem = entry.name.removesuffix(".json")
            if entry.name.endswith(".json") and RESPONSE_ID.fullmatch(stem):
                index[stem] = _Entry(info.st_mtime, info.st_size, owner)
            elif (
                entry.name.endswith(".tmp") and info.st_mtime < self._clock() - _STALE_TEMP_SECONDS
            ):
                _unlink(Path(entry.path))

    def _write(self, response_id: str, owner: str | None, data: bytes) -> float:
        """Write the file atomically; its modification time (this store's clock) is returned."""
        folder = self._folder(owner)
        folder.mkdir(parents=True, exist_ok=True)
        temp = folder / f".{response_id}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with temp.open("wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            now = self._clock()
            os.utime(temp, (now, now))  # the age the bounds read, on this store's clock
            os.replace(temp, self._path(response_id, owner))
        except BaseException:
            _unlink(temp)
            raise
        return now

    def _prune(self, index: dict[str, _Entry], writer: str | None) -> None:
        """Drop expired responses; then, while the store is over a bound, the oldest of the
        owner holding the largest share (the writer on a tie)."""
        for response_id in [rid for rid, entry in index.items() if self._expired(entry)]:
            self._remove(response_id)
        total = sum(entry.size for entry in index.values())
        if len(index) <= self.max_count and total <= self.max_bytes:
            return
        by_owner: dict[str | None, list[str]] = {}
        for response_id in sorted(index, key=lambda rid: index[rid].mtime):
            by_owner.setdefault(index[response_id].owner, []).append(response_id)
        used = {owner: sum(index[rid].size for rid in ids) for owner, ids in by_owner.items()}

        def share(owner: str | None) -> tuple[float, bool]:
            ids = by_owner[owner]
            fraction = max(len(ids) / self.max_count, used[owner] / self.max_bytes)
            return fraction, owner == writer

        while index and (len(index) > self.max_count or total > self.max_bytes):
            largest = max((o for o in by_owner if by_owner[o]), key=share)
            response_id = by_owner[largest].pop(0)
            size = index[response_id].size
            total -= size
            used[largest] -= size
            self._remove(response_id)

    def _expired(self, entry: _Entry) -> bool:
        return entry.mtime < self._clock() - self.max_age_seconds

    def _remove(self, response_id: str) -> None:
        entry = self._entries().pop(response_id, None)
        _unlink(self._path(response_id, entry.owner if entry is not None else None))

    def _folder(self, owner: str | None) -> Path:
        return self.root if owner is None else self.root / owner

    def _path(self, response_id: str, owner: str | None) -> Path:
        return self._folder(owner) / f"{response_id}.json"


def encode(stored: StoredResponse) -> bytes:
    """The file's bytes for ``stored`` (its size is what the bounds count)."""
    return json.dumps(
        {"format": _FORMAT, "response": stored.response, "context": stored.context},
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8")


def _check_owner(owner: str | None) -> None:
    if owner is not None and not OWNER.fullmatch(owner):
        raise ValueError(f"not an owner: {owner!r}")


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        logger.warning("could not remove %s: %s", path, exc)
