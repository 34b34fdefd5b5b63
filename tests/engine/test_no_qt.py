"""engine/ must stay usable headless: importing all of it never imports Qt."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "engine"


def test_engine_modules_import_without_qt() -> None:
    modules = sorted(
        ".".join(p.relative_to(ENGINE.parent).with_suffix("").parts)
        for p in ENGINE.rglob("*.py")
        if p.name != "__init__.py"
    )
    assert "engine.supervisor.client" in modules
    script = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "qt = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'PyQt5', 'PyQt6', 'shiboken6')]\n"
        "print(','.join(qt))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_engine_source_never_names_qt() -> None:
    offenders = [p.name for p in ENGINE.rglob("*.py") if "PySide6" in p.read_text(encoding="utf-8")]
    assert offenders == []
