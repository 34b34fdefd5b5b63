"""Build the one-folder desktop bundle with PyInstaller and check its size.

    python3 packaging/build.py [--budget-mb N] [--write-docs] [--skip-build]

Builds ``dist/sidelight/`` from ``packaging/sidelight.spec`` (``sidelight`` windowed,
``sidelight-cli`` console, one shared ``_internal`` folder) in the project's ``.venv`` with its
``package`` extra (PyInstaller), then reports the bundle's size, the ten largest files and the
size of each top-level part. It fails (exit code 1) when the bundle is larger than the budget.
``--write-docs`` puts those figures into ``docs/packaging.md`` between its size markers.

Only the standard library is used, like ``dev.py``; work files go to ``build/pyinstaller``.
On Linux PyInstaller needs ``objdump`` and Python's shared library: binutils and
libpython3.X are installed with apt-get when missing (as root).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import dev

ROOT = dev.ROOT
SPEC = ROOT / "packaging" / "sidelight.spec"
DIST = ROOT / "dist"
BUNDLE = DIST / "sidelight"
WORK = ROOT / "build" / "pyinstaller"
DOC = ROOT / "docs" / "packaging.md"
# The bundle measured 427 MB on Linux x86-64 (OpenVINO 2026.4, PySide6 6.11), then 573 MB
# once speech came (PyAV for the audio uploads: its FFmpeg libraries 85 MB, av 36 MB; its
# video encoders, x265 alone 20 MB, are not needed and are the place to trim), then 588 MB
# with Qt Multimedia for dictation (its library; Qt's FFmpeg plugin and the Quick, QML and
# PDF libraries the add-ons' other plugins pull in are left out by the spec). The budget
# leaves room for small growth; a jump past it means something large slipped in (torch, a
# second Qt, a model).
BUDGET_MB = 600
DOC_BEGIN = "<!-- sizes:begin (written by packaging/build.py --write-docs) -->"
DOC_END = "<!-- sizes:end -->"
MB = 1_000_000


@dataclass(frozen=True)
class Report:
    total: int
    files: int
    largest: list[tuple[str, int]]  # the ten largest files, relative to the bundle
    parts: list[tuple[str, int]]  # size per top-level part of the bundle, largest first
    seconds: float | None  # the build's duration, when this run built it


def _ensure_linux_build_tools() -> None:
    """What PyInstaller needs on Linux beyond pip: objdump and Python's shared library.

    Debian's own Python links libpython statically; the bundle needs the shared one, which
    is a separate package there (as is binutils' objdump, which PyInstaller reads
    libraries' dependencies with). Installed with apt-get as root, named otherwise.
    """
    if not sys.platform.startswith("linux"):
        return
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    missing = [] if shutil.which("objdump") else ["binutils"]
    if not dev.loadable(f"libpython{version}.so.1.0"):
        missing.append(f"libpython{version}")
    message = f"installing what PyInstaller needs: {' '.join(missing)}"
    if missing and not dev.apt_install(missing, dev.say, message):
        sys.exit(f"[dev] PyInstaller needs: apt-get install -y {' '.join(missing)}")


def build() -> None:
    python = dev.ensure_app_env()
    _ensure_linux_build_tools()
    if os.name == "nt":
        icon = ROOT / "build" / "windows" / "sidelight.ico"
        subprocess.run(
            [str(python), str(ROOT / "packaging" / "windows" / "make_icon.py"), str(icon)],
            check=True,
        )
    command = [
        str(python),
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--log-level=WARN",
        f"--distpath={DIST}",
        f"--workpath={WORK}",
        str(SPEC),
    ]
    dev.say(f"building {BUNDLE.relative_to(ROOT)} with PyInstaller")
    subprocess.run(command, cwd=ROOT, check=True)


def measure(bundle: Path, seconds: float | None) -> Report:
    sizes: dict[str, int] = {}
    for path in bundle.rglob("*"):
        if path.is_file() and not path.is_symlink():
            sizes[path.relative_to(bundle).as_posix()] = path.stat().st_size
    parts: dict[str, int] = {}
    for name, size in sizes.items():
        parts[_part(name)] = parts.get(_part(name), 0) + size
    return Report(
        total=sum(sizes.values()),
        files=len(sizes),
        largest=sorted(sizes.items(), key=lambda item: -item[1])[:10],
        parts=sorted(parts.items(), key=lambda item: -item[1]),
        seconds=seconds,
    )


def _part(name: str) -> str:
    """``_internal/openvino/libs/x.so`` -> ``openvino``; files directly in _internal together."""
    pieces = name.split("/")
    if pieces[0] == "_internal":
        pieces = pieces[1:]
    if len(pieces) == 1:
        return (
            "executables"
            if not name.startswith("_internal/")
            else "_internal (libpython, system libraries)"
        )
    return pieces[0]


def render(report: Report) -> str:
    took = f"; built in {report.seconds / 60:.1f} min" if report.seconds is not None else ""
    lines = [
        f"Bundle `dist/sidelight/` on {platform.system()} {platform.machine()}, Python "
        f"{platform.python_version()}: **{report.total / MB:.0f} MB** in {report.files} files "
        f"(budget {BUDGET_MB} MB in `packaging/build.py`{took}).",
        "",
        "| Largest files | MB |",
        "| --- | ---: |",
        *(f"| `{name}` | {size / MB:.1f} |" for name, size in report.largest),
        "",
        "| Parts | MB |",
        "| --- | ---: |",
        *(f"| {name} | {size / MB:.1f} |" for name, size in report.parts[:12]),
    ]
    rest = report.parts[12:]
    if rest:
        lines.append(f"| {len(rest)} others | {sum(s for _, s in rest) / MB:.1f} |")
    return "\n".join(lines)


def write_docs(text: str) -> None:
    doc = DOC.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(DOC_BEGIN) + ".*?" + re.escape(DOC_END), re.DOTALL)
    if not pattern.search(doc):
        sys.exit(f"{DOC} has no size markers ({DOC_BEGIN} ... {DOC_END})")
    DOC.write_text(pattern.sub(lambda _: f"{DOC_BEGIN}\n{text}\n{DOC_END}", doc), encoding="utf-8")
    dev.say(f"wrote the figures into {DOC.relative_to(ROOT)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-mb", type=int, default=BUDGET_MB)
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOC.name}")
    parser.add_argument("--skip-build", action="store_true", help="measure the existing bundle")
    args = parser.parse_args()
    started = time.monotonic()
    if not args.skip_build:
        build()
    if not (BUNDLE / ("sidelight-cli.exe" if os.name == "nt" else "sidelight-cli")).is_file():
        dev.say(f"no bundle in {BUNDLE}")
        return 1
    report = measure(BUNDLE, None if args.skip_build else time.monotonic() - started)
    text = render(report)
    sys.stdout.write(text + "\n")
    if args.write_docs:
        write_docs(text)
    if report.total > args.budget_mb * MB:
        dev.say(f"the bundle is {report.total / MB:.0f} MB, over the {args.budget_mb} MB budget")
        return 1
    dev.say(f"bundle OK: {report.total / MB:.0f} MB (budget {args.budget_mb} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
