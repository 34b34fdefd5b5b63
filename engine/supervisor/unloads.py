"""Why a model went away: per-model unload events, for the tray and ``/health``.

A model leaves memory for one of a few reasons (:data:`UnloadReason`): it was idle for its
keep-alive, a request asked ``keep_alive 0``, another model needed its room, the machine ran
short of memory or went on battery (:mod:`engine.supervisor.pressure`), someone unloaded it
(the tray, a device change), or its worker crashed or hung. The scheduler records each as
an :class:`UnloadEvent` in an :class:`UnloadLog`: a bounded list of the recent ones
(``/health`` ``unloaded_models``) and listeners (the desktop's tray notification).

Threading: :class:`UnloadLog` has a lock of its own, taken last (never while calling out),
so it may be called under the scheduler's or a client's lock. Listeners are called on the
thread that recorded the event, with no lock of the log held; they must not block (the
desktop hops to its GUI thread).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from engine.listeners import Listeners
from engine.supervisor.states import EngineIncident, EngineStatus

logger = logging.getLogger(__name__)

UnloadReason = Literal[
    "idle",  # no request for its keep-alive (idle_unload_seconds, keep_alive, ttl)
    "keep_alive",  # a request asked keep_alive 0
    "evicted",  # another model needed its room in the memory budget
    "memory_pressure",  # the machine ran short of memory (memory_pressure_mb)
    "on_battery",  # the laptop runs on battery (unload_on_battery)
    "requested",  # unloaded by hand (the tray, the API) or moved to another device
    "crashed",  # its worker died or hung (it restarts, or waits for the next request)
]
"""Why a model left memory (the wire value is the string)."""

RECENT_EVENTS: Final = 20  # how many unload events /health and the tray keep


def reason_of(unloaded: str) -> UnloadReason:
    """The reason for an :attr:`EngineStatus.unloaded` text a client set when it ended its
    model's worker on its own (``"idle"``; ``"keep_alive 0"`` from a request). Any other
    text came from someone asking (:meth:`EngineClient.release`)."""
    if unloaded == "idle":
        return "idle"
    if unloaded.startswith("keep_alive"):
        return "keep_alive"
    return "requested"


@dataclass(frozen=True)
class UnloadEvent:
    """One model that went away: which, why (typed), the words for people, and when."""

    model_id: str
    reason: UnloadReason
    message: str  # "idle", "evicted for qwen2.5-coder", "exit code -9; restarting", ...
    at: float  # seconds since the epoch

    def text(self) -> str:
        """One line for the tray: "<model> was unloaded: <why>" ("<model> stopped:
        <what happened>" for a crash or hang)."""
        if self.reason == "crashed":
            return f"{self.model_id} stopped: {self.message}"
        if self.reason == "requested":
            # The words say how ("unloaded from the tray", "moving to GPU"); once, never
            # "was unloaded: unloaded on request (unloaded from the tray)".
            how = self.message.removeprefix("unloaded").strip()
            if not how:
                return f"{self.model_id} was unloaded on request"
            if how.startswith(("from ", "by ")):
                return f"{self.model_id} was unloaded {how}"
            return f"{self.model_id} was unloaded: {how}"
        why = {
            "idle": "idle",
            "keep_alive": "keep_alive 0",
            "evicted": "made room for another model",
            "memory_pressure": "the computer is low on memory",
            "on_battery": "running on battery",
            "requested": "unloaded on request",
            "crashed": "",
        }[self.reason]
        detail = f" ({self.message})" if self.message and self.message != why else ""
        return f"{self.model_id} was unloaded: {why}{detail}"

    def to_dict(self) -> dict[str, Any]:
        when = datetime.fromtimestamp(self.at, UTC).isoformat(timespec="seconds")
        return {"id": self.model_id, "reason": self.reason, "message": self.message, "at": when}


class UnloadLog:
    """The recent unload events (newest last, at most :data:`RECENT_EVENTS`) and listeners.

    Also turns a model's status changes into events (:meth:`note_status`): the moment a
    client's model goes (``unloaded`` set, no model) or its worker has a new incident.
    """

    def __init__(self, keep: int = RECENT_EVENTS) -> None:
        self._lock = threading.Lock()
        self._events: deque[UnloadEvent] = deque(maxlen=keep)
        self._listeners: Listeners[[UnloadEvent]] = Listeners("unload")
        # Per client (a model reloaded gets a new one; the old one's last statuses still
        # come): whether it held a model last time, and the last incident seen.
        self._had_model: weakref.WeakKeyDictionary[object, bool] = weakref.WeakKeyDictionary()
        self._incident: weakref.WeakKeyDictionary[object, EngineIncident | None] = (
            weakref.WeakKeyDictionary()
        )

    def record(self, model_id: str, reason: UnloadReason, message: str = "") -> UnloadEvent:
        """Add an event now and tell the listeners (any thread)."""
        event = UnloadEvent(model_id, reason, message, time.time())
        with self._lock:
            self._events.append(event)
        logger.info("%s", event.text())
        self._listeners.emit(event)
        return event

    def note_status(self, client: object, model_id: str, status: EngineStatus) -> None:
        """``client``'s status changed: record its model leaving on its own (idle,
        keep_alive) or its worker's crash, once each (any thread; the client's lock may be
        held)."""
        events: list[tuple[UnloadReason, str]] = []
        with self._lock:
            had = self._had_model.get(client, False)
            self._had_model[client] = status.model is not None
            if had and status.model is None and status.unloaded is not None:
                events.append((reason_of(status.unloaded), status.unloaded))
            incident = status.last_error
            seen = client in self._incident
            if seen and incident is not None and incident is not self._incident[client]:
                events.append(("crashed", incident.message))
            self._incident[client] = incident
        for reason, message in events:
            self.record(model_id, reason, message)

    def recent(self) -> list[UnloadEvent]:
        """The recent events, oldest first."""
        with self._lock:
            return list(self._events)

    def add_listener(self, listener: Callable[[UnloadEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with each new event; returns an undo."""
        return self._listeners.add(listener)
