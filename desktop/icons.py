"""The tray's state icons, loaded from ``resources/icons`` through ``engine.resources``."""

from __future__ import annotations

from functools import cache

from PySide6.QtGui import QIcon

from engine.resources import resource_path
from engine.supervisor.states import ERROR, LOADING, READY, RESTARTING, STARTING, EngineStatus

IDLE, BUSY_LOADING, GENERATING, FAILED = "idle", "loading", "generating", "error"


@cache
def icon(name: str) -> QIcon:
    """``sidelight-<name>.svg`` (``idle``, ``loading``, ``generating``, ``error``) or the app icon.

    Threading: GUI thread only (QIcon); cached after the first call.
    """
    file = f"sidelight-{name}.svg" if name else "sidelight.svg"
    return QIcon(str(resource_path("icons", file)))


def state_icon_name(status: EngineStatus, generating: bool, server_error: bool) -> str:
    """Which icon the tray shows for this engine state."""
    if status.state == ERROR or server_error:
        return FAILED
    if status.state in (LOADING, STARTING, RESTARTING):
        return BUSY_LOADING
    if generating and status.state == READY:
        return GENERATING
    return IDLE
