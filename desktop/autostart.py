"""Start at login: opt-in, off by default, switched from the Settings dialog.

* Linux and other XDG desktops: ``$XDG_CONFIG_HOME/autostart/sidelight.desktop``.
* Windows: a value named ``Sidelight`` under the current user's
  ``Software\\Microsoft\\Windows\\CurrentVersion\\Run`` registry key (no administrator rights,
  and Windows' own Startup Apps page can switch it off too).
* macOS: not supported yet (:func:`for_platform` returns ``None``).

Qt-free; the file and registry writes are tiny and run on the GUI thread.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Protocol

logger = logging.getLogger(__name__)

APP_ID = "sidelight"
RUN_KEY = r"Software\Microsoft\Windows\CurrentVersion\Run"
RUN_VALUE = "Sidelight"


class Autostart(Protocol):
    """Where this platform keeps "start at login", and how to switch it."""

    def is_enabled(self) -> bool: ...

    def enable(self, command: list[str]) -> None: ...

    def disable(self) -> None: ...


def launch_command() -> list[str]:
    """How to start this Sidelight again: the frozen executable, or this Python."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    python = Path(sys.executable)
    windowless = python.with_name("pythonw.exe")  # no console window at login on Windows
    if sys.platform.startswith("win") and windowless.exists():
        python = windowless
    return [str(python), "-m", "engine.cli"]


def for_platform() -> Autostart | None:
    """This system's start-at-login mechanism (``None`` where not supported yet)."""
    if sys.platform == "win32":
        return WindowsRunKey(WinregRunKey())
    if sys.platform == "darwin":
        return None
    return XdgAutostart(xdg_autostart_dir())


def set_enabled(autostart: Autostart, enabled: bool) -> None:
    """Switch start-at-login on (for :func:`launch_command`) or off."""
    if enabled:
        autostart.enable(launch_command())
    else:
        autostart.disable()


# ---- Linux (XDG) -----------------------------------------------------------------------


def xdg_autostart_dir() -> Path:
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "autostart"


class XdgAutostart:
    """A desktop entry in the XDG autostart folder."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / f"{APP_ID}.desktop"

    def is_enabled(self) -> bool:
        if not self.path.is_file():
            return False
        text = self.path.read_text(encoding="utf-8", errors="replace")
        return "Hidden=true" not in text and "X-GNOME-Autostart-enabled=false" not in text

    def enable(self, command: list[str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        exec_line = " ".join(_desktop_quote(arg) for arg in command)
        self.path.write_text(
            "[Desktop Entry]\n"
            "Type=Application\n"
            "Name=Sidelight\n"
            "Comment=Local LLMs on Intel CPUs, GPUs and NPUs\n"
            f"Exec={exec_line}\n"
            "Icon=sidelight\n"
            "Terminal=false\n"
            "X-GNOME-Autostart-enabled=true\n",
            encoding="utf-8",
        )
        logger.info("start at login enabled (%s)", self.path)

    def disable(self) -> None:
        self.path.unlink(missing_ok=True)
        logger.info("start at login disabled")


def _desktop_quote(arg: str) -> str:
    """Quote one Exec argument as the Desktop Entry Specification asks."""
    if arg and not any(c in arg for c in " \t\n\"'\\><~|&;$*?#()`"):
        return arg
    escaped = "".join("\\" + c if c in '"`$\\' else c for c in arg)
    return f'"{escaped}"'


# ---- Windows (registry Run key) --------------------------------------------------------


class RunKeyWriter(Protocol):
    """Reads and writes one string value under the current user's Run key."""

    def get(self, name: str) -> str | None: ...

    def set(self, name: str, value: str) -> None: ...

    def delete(self, name: str) -> None: ...


if sys.platform == "win32":  # mypy checks this block only for Windows
    import winreg

    class WinregRunKey:
        """The real ``HKEY_CURRENT_USER\\...\\Run`` key through ``winreg``."""

        def get(self, name: str) -> str | None:
            try:
                with winreg.OpenKey(winreg.HKEY_CURRENT_USER, RUN_KEY) as key:
                    value, _ = winreg.QueryValueEx(key, name)
            except FileNotFoundError:
                return None
            return str(value)

        def set(self, name: str, value: str) -> None:
            with winreg.CreateKey(winreg.HKEY_CURRENT_USER, RUN_KEY) as key:
                winreg.SetValueEx(key, name, 0, winreg.REG_SZ, value)

        def delete(self, name: str) -> None:
            try:
                with winreg.OpenKey(
                    winreg.HKEY_CURRENT_USER, RUN_KEY, 0, winreg.KEY_SET_VALUE
                ) as key:
                    winreg.DeleteValue(key, name)
            except FileNotFoundError:
                pass


class WindowsRunKey:
    """Start at login through the Run key; ``writer`` is the registry (or a test stand-in)."""

    def __init__(self, writer: RunKeyWriter) -> None:
        self.writer = writer

    def is_enabled(self) -> bool:
        return bool(self.writer.get(RUN_VALUE))

    def enable(self, command: list[str]) -> None:
        self.writer.set(RUN_VALUE, subprocess.list2cmdline(command))
        logger.info("start at login enabled (registry Run key)")

    def disable(self) -> None:
        self.writer.delete(RUN_VALUE)
        logger.info("start at login disabled")
