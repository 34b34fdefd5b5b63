"""What the tray app remembers between runs (not configuration): last model and device.

Configuration lives in ``config.json`` and is read by ``engine.settings`` alone; this small
file (``desktop-state.json`` beside it) holds only the app's own memory. Qt-free.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

STATE_FILE = "desktop-state.json"


@dataclass
class DesktopState:
    last_model: str | None = None
    last_device: str | None = None
    welcomed: bool = False

    @classmethod
    def load(cls, config_dir: Path) -> DesktopState:
        """Read the state; a missing or unreadable file gives the defaults."""
        path = config_dir / STATE_FILE
        try:
            data: Any = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError):
            logger.warning("ignoring unreadable %s", path)
            return cls()
        if not isinstance(data, dict):
            return cls()
        return cls(
            last_model=_opt_str(data.get("last_model")),
            last_device=_opt_str(data.get("last_device")),
            welcomed=bool(data.get("welcomed", False)),
        )

    def save(self, config_dir: Path) -> None:
        config_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=config_dir, prefix=".state-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(asdict(self), fh, indent=1)
            os.replace(tmp, config_dir / STATE_FILE)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
            logger.warning("cannot save %s", config_dir / STATE_FILE, exc_info=True)


def _opt_str(value: Any) -> str | None:
    return str(value) if value else None
