"""The one way to find files under ``resources/`` (icons, the demo model, the catalog).

Works from a source checkout, an installed wheel (``resources`` is package data) and a
PyInstaller bundle (``sys._MEIPASS``).
"""

from __future__ import annotations

import sys
from pathlib import Path


def resources_root() -> Path:
    frozen = getattr(sys, "_MEIPASS", None)
    if frozen:
        return Path(frozen) / "resources"
    import resources

    return Path(next(iter(resources.__path__)))


def resource_path(*parts: str) -> Path:
    return resources_root().joinpath(*parts)


def demo_model_path() -> Path:
    """The tiny model that ships with Sidelight so it answers even offline."""
    return resource_path("models", "sidelight-demo")
