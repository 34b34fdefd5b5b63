"""Qt's X11 plugin and the system libraries it needs: the list is complete, a gap is one line.

The list is checked against the ELF ``DT_NEEDED`` entries of the installed ``libqxcb.so``
and the Qt libraries it loads. The failure is real: a copy of the plugin whose first needed
X library is renamed to one no system has, in a PySide6 folder that is otherwise the
installed one (symlinks), started the way a user starts the app.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from desktop.platform_libs import QT_SYSTEM_LIBRARIES, debian_packages, xcb_plugin
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11 is Linux")

# In every Debian/Ubuntu system, minimal ones included (libc6, libstdc++6, libgcc-s1, zlib1g,
# and libzstd1, which dpkg itself needs).
BASE_SYSTEM = {
    "libzstd.so.1",
    "libc.so.6",
    "libm.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
    "libstdc++.so.6",
    "libgcc_s.so.1",
    "libz.so.1",
}
PT_LOAD, PT_DYNAMIC, DT_NEEDED, DT_STRTAB = 1, 2, 1, 5


def needed(library: Path) -> list[str]:
    """The ``DT_NEEDED`` names of a 64-bit little-endian ELF shared library."""
    data = library.read_bytes()
    assert data[:6] == b"\x7fELF\x02\x01", f"{library} is not a 64-bit little-endian ELF"
    phoff, phentsize, phnum = (
        struct.unpack_from("<Q", data, 0x20)[0],
        *struct.unpack_from("<HH", data, 0x36),
    )
    loads, dynamic = [], None
    for i in range(phnum):
        kind, _, offset, vaddr, _, filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize
        )
        if kind == PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif kind == PT_DYNAMIC:
            dynamic = (offset, filesz)
    assert dynamic is not None, f"{library} has no dynamic section"
    entries = [struct.unpack_from("<qQ", data, dynamic[0] + at) for at in range(0, dynamic[1], 16)]
    strtab = next(value for tag, value in entries if tag == DT_STRTAB)
    base = next(
        offset + strtab - vaddr for vaddr, offset, size in loads if vaddr <= strtab < vaddr + size
    )
    return [
        data[base + value : data.index(b"\0", base + value)].decode()
        for tag, value in entries
        if tag == DT_NEEDED
    ]  # fmt: skip


def test_the_list_is_what_the_xcb_plugin_needs_from_the_system() -> None:
    plugin = xcb_plugin()
    assert plugin is not None, "PySide6 with its X11 plugin is installed with the gui extra"
    qt_lib = plugin.parents[2] / "lib"
    system: set[str] = set()
    seen: set[str] = set()
    todo = [plugin]
    while todo:
        for name in needed(todo.pop()):
            if (qt_lib / name).is_file():
                if name not in seen:
                    seen.add(name)
                    todo.append(qt_lib / name)
            else:
                system.add(name)
    assert "libQt6XcbQpa.so.6" in seen and "libQt6Gui.so.6" in seen
    assert sorted(system - BASE_SYSTEM) == sorted(QT_SYSTEM_LIBRARIES)
    assert "libxcb-cursor0" in debian_packages()


@pytest.fixture
def broken_pyside(tmp_path: Path) -> Path:
    """A PySide6 folder like the installed one whose X11 plugin needs a library nobody has."""
    plugin = xcb_plugin()
    assert plugin is not None
    real = plugin.parents[3]
    fake = tmp_path / "site" / "PySide6"
    platforms = fake / "Qt" / "plugins" / "platforms"
    platforms.mkdir(parents=True)
    for parent, target in ((real, fake), (real / "Qt", fake / "Qt")):
        for entry in parent.iterdir():
            if not (target / entry.name).exists():
                (target / entry.name).symlink_to(entry)
    for entry in (real / "Qt" / "plugins").iterdir():
        if entry.name != "platforms":
            (fake / "Qt" / "plugins" / entry.name).symlink_to(entry)
    data = plugin.read_bytes()
    assert b"libxcb-cursor.so.0\0" in data
    (platforms / plugin.name).write_bytes(
        data.replace(b"libxcb-cursor.so.0\0", b"libxcb-nowhere.so\0\0")
    )
    return fake.parent


def test_a_missing_library_is_one_clear_line(broken_pyside: Path, sidelight_home: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join([str(broken_pyside), str(ROOT)]),
        "SIDELIGHT_HOME": str(sidelight_home),
        "DISPLAY": ":99",
        "QT_QPA_PLATFORM": "xcb",
    }
    result = subprocess.run(
        [sys.executable, "-m", "engine.cli"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.splitlines()  # one line, not Qt's warnings and an abort
    # (followed by any other library this machine lacks, with its Debian package)
    assert line.startswith(
        "sidelight: Qt's X11 platform plugin (xcb) cannot load: libxcb-nowhere.so"
    ), line
    assert "not found" in line
