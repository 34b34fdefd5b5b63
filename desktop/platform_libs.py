"""The system libraries Qt's X11 platform plugin needs, and a check that it can load.

Without them Qt prints a screenful of warnings and aborts inside ``QApplication()``.
:func:`xcb_problem` runs first and says in one line which libraries are missing. It imports
no Qt (it must work when PySide6's own libraries cannot load) and only the standard library:
``packaging/dev.py`` and ``packaging/deb.py`` load this file by path for the Debian packages
to install and to depend on.

Threading: any thread; :func:`xcb_problem` loads the plugin into the process.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

# Every library that PySide6's libqxcb.so and the Qt libraries it loads take from the system,
# with the Debian/Ubuntu package that ships it: the "not found" lines of ``ldd libqxcb.so``
# on a minimal Debian 12 (debootstrap --variant=minbase). It covers QtCore and QtGui too, so
# also the offscreen platform the tests use. tests/desktop/test_platform_libs.py checks it
# against what the installed plugin needs.
QT_SYSTEM_LIBRARIES: dict[str, str] = {
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libX11.so.6": "libx11-6",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libdbus-1.so.3": "libdbus-1-3",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
    "libxcb.so.1": "libxcb1",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
}
# What Qt Multimedia (dictation and Read aloud) links against beyond the above: PulseAudio's
# client library, also what PipeWire desktops serve through pipewire-pulse.
QT_AUDIO_LIBRARIES: dict[str, str] = {"libpulse.so.0": "libpulse0"}
# The sound server and its tools the dictation tests run (a private server with a virtual
# microphone: tests/desktop/virtual_audio.py); installed by ``packaging/dev.py test``.
AUDIO_TEST_PACKAGES: dict[str, str] = {
    "pulseaudio": "pulseaudio",
    "pactl": "pulseaudio-utils",
    "paplay": "pulseaudio-utils",
    "parec": "pulseaudio-utils",
}
_MISSING = re.compile(r"^\s*(\S+) => not found", re.M)
_DLERROR = re.compile(r"^(\S+\.so[.\d]*): cannot open shared object file")


def debian_packages() -> list[str]:
    """The Debian/Ubuntu packages of :data:`QT_SYSTEM_LIBRARIES` and
    :data:`QT_AUDIO_LIBRARIES`, sorted, each once."""
    return sorted({*QT_SYSTEM_LIBRARIES.values(), *QT_AUDIO_LIBRARIES.values()})


def gui_installed() -> bool:
    """Whether PySide6 is installed (the ``gui`` extra), without importing it."""
    return importlib.util.find_spec("PySide6") is not None


def xcb_plugin() -> Path | None:
    """PySide6's X11 platform plugin (``libqxcb.so``), or None without PySide6 (or on Windows)."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or spec.origin is None:
        return None
    plugin = Path(spec.origin).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    return plugin if plugin.is_file() else None


def uses_xcb(environ: Mapping[str, str]) -> bool:
    """Whether Qt would try the X11 plugin first (Linux; QT_QPA_PLATFORM, XDG_SESSION_TYPE)."""
    if not sys.platform.startswith("linux"):
        return False
    requested = environ.get("QT_QPA_PLATFORM", "").split(";")[0].strip()
    if requested:
        return requested == "xcb"
    return environ.get("XDG_SESSION_TYPE") != "wayland"


def missing_libraries(library: Path) -> list[str]:
    """The libraries ``ldd`` cannot find for ``library``, in its order (empty without ldd)."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return []
    result = subprocess.run(
        [ldd, str(library)], capture_output=True, text=True, timeout=30, check=False
    )
    return list(dict.fromkeys(_MISSING.findall(result.stdout)))


def xcb_problem(environ: Mapping[str, str] = os.environ) -> str | None:
    """One line saying why Qt's X11 plugin cannot load, or None when it can or is not used.

    Loads the plugin as Qt would (``dlopen``); only when that fails does ``ldd`` list every
    missing library, with the Debian/Ubuntu packages that ship them.
    """
    plugin = xcb_plugin() if uses_xcb(environ) else None
    if plugin is None:
        return None
    try:
        ctypes.CDLL(str(plugin))
    except OSError as exc:
        first = _DLERROR.match(str(exc))
        missing = missing_libraries(plugin) or ([first.group(1)] if first else [])
        if not missing:
            return f"Qt's X11 platform plugin (xcb) cannot load: {exc}"
        packages = sorted({QT_SYSTEM_LIBRARIES[m] for m in missing if m in QT_SYSTEM_LIBRARIES})
        hint = f"; on Debian/Ubuntu: sudo apt install {' '.join(packages)}" if packages else ""
        return f"Qt's X11 platform plugin (xcb) cannot load: {', '.join(missing)} not found{hint}"
    return None
