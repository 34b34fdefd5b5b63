"""Compile the Windows installer script with makensis against a placeholder payload.

    python3 packaging/nsis.py [--payload DIR] [--out FILE]

Without ``--payload`` this checks ``packaging/windows/sidelight.nsi`` on Linux: a folder with
stand-in ``sidelight.exe``, ``sidelight-cli.exe`` and ``_internal`` files is compiled into
``build/nsis/sidelight-setup-placeholder.exe``. The Windows workflow passes the real bundle.
``makensis`` (Debian package ``nsis``) is installed with apt-get when missing (as root). The
icon is rendered by ``packaging/windows/make_icon.py`` with the project's ``.venv`` Python.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dev

ROOT = dev.ROOT
SCRIPT = ROOT / "packaging" / "windows" / "sidelight.nsi"
WORK = ROOT / "build" / "nsis"
ICON = ROOT / "build" / "windows" / "sidelight.ico"


def _makensis() -> str:
    found = shutil.which("makensis")
    if found:
        return found
    if os.name == "nt":
        for folder in (os.environ.get("PROGRAMFILES(X86)"), os.environ.get("PROGRAMFILES")):
            candidate = Path(folder or "C:\\") / "NSIS" / "makensis.exe"
            if candidate.is_file():
                return str(candidate)
        sys.exit("[nsis] makensis not found: choco install nsis")
    if not dev.apt_install(["nsis"], dev.say):
        sys.exit("[nsis] makensis not found: apt-get install -y nsis")
    return shutil.which("makensis") or sys.exit("[nsis] makensis still not found")


def placeholder_payload() -> Path:
    payload = WORK / "payload"
    shutil.rmtree(payload, ignore_errors=True)
    (payload / "_internal" / "resources").mkdir(parents=True)
    for name in ("sidelight.exe", "sidelight-cli.exe"):
        (payload / name).write_bytes(b"MZ placeholder for the makensis check\n")
    (payload / "_internal" / "python311.dll").write_bytes(b"placeholder\n")
    (payload / "_internal" / "resources" / "catalog.json").write_text("{}\n")
    return payload


def compile_installer(payload: Path, out: Path) -> Path:
    makensis = _makensis()
    python = dev.ensure_app_env()
    subprocess.run(
        [str(python), str(ROOT / "packaging" / "windows" / "make_icon.py"), str(ICON)], check=True
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    command = [
        makensis,
        "-V2",
        "-WX",  # warnings are errors: the script must stay clean
        f"-DVERSION={dev.version()}",
        f"-DPAYLOAD={payload}",
        f"-DICON={ICON}",
        f"-DOUTFILE={out}",
        str(SCRIPT),
    ]
    dev.say(f"makensis {SCRIPT.relative_to(ROOT)} (payload {payload})")
    subprocess.run(command, check=True)
    if not out.is_file() or out.read_bytes()[:2] != b"MZ":
        sys.exit(f"[nsis] makensis did not write {out}")
    dev.say(f"compiled {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payload", type=Path, help="the bundle folder (default: a placeholder)")
    parser.add_argument(
        "--out",
        type=Path,
        help="the installer (default with --payload: dist/sidelight-VERSION-setup.exe)",
    )
    args = parser.parse_args()
    payload = args.payload.resolve() if args.payload else placeholder_payload()
    default = ROOT / "dist" / f"sidelight-{dev.version()}-setup.exe" if args.payload else None
    out = args.out or default or WORK / "sidelight-setup-placeholder.exe"
    compile_installer(payload, out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
