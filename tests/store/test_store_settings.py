"""The store's settings: a hub token and a conversion interpreter, from env or config file."""

from __future__ import annotations

import json
from pathlib import Path

from engine.settings import load_settings


def test_store_settings_from_env_and_file(tmp_path: Path) -> None:
    defaults = load_settings({"SIDELIGHT_HOME": str(tmp_path)})
    assert defaults.hf_token is None and defaults.convert_python is None
    assert defaults.paths.models_dir == tmp_path / "models"

    config = tmp_path / "config" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"hf_token": "from-file", "convert_python": "~/conv/python"}))
    from_file = load_settings({"SIDELIGHT_HOME": str(tmp_path)})
    assert from_file.hf_token == "from-file"
    assert from_file.convert_python == Path("~/conv/python").expanduser()

    env = {"SIDELIGHT_HOME": str(tmp_path), "SIDELIGHT_HF_TOKEN": "from-env"}
    assert load_settings(env).hf_token == "from-env"
