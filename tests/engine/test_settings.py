"""Settings: one place, environment over config file over defaults, unsafe values refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.settings import DEFAULT_PORT, SettingsError, load_settings, save_config


def test_defaults_are_loopback_on_a_port_no_rival_uses(tmp_path: Path) -> None:
    settings = load_settings({"SIDELIGHT_HOME": str(tmp_path)})
    assert settings.host == "127.0.0.1"
    assert settings.port == DEFAULT_PORT
    assert DEFAULT_PORT not in {11434, 1234, 1337, 8080, 8000, 9000}
    assert settings.api_key is None
    assert settings.cpu.properties() == {"ENABLE_CPU_PINNING": False}
    settings.validate()


def test_home_moves_every_folder(tmp_path: Path) -> None:
    paths = load_settings({"SIDELIGHT_HOME": str(tmp_path)}).paths
    for folder in (paths.config_dir, paths.models_dir, paths.cache_dir, paths.log_dir):
        assert folder.is_relative_to(tmp_path)
    assert paths.responses_dir.is_relative_to(paths.data_dir)
    assert paths.data_dir.is_relative_to(tmp_path)
    paths.ensure()
    assert paths.log_dir.is_dir()


def test_single_folder_override_beats_home(tmp_path: Path) -> None:
    env = {"SIDELIGHT_HOME": str(tmp_path / "a"), "SIDELIGHT_MODELS_DIR": str(tmp_path / "m")}
    assert load_settings(env).paths.models_dir == tmp_path / "m"


def test_environment_beats_config_file(tmp_path: Path) -> None:
    config = tmp_path / "config" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"port": 9100, "device": "GPU", "cpu_threads": 2}))
    settings = load_settings({"SIDELIGHT_HOME": str(tmp_path), "SIDELIGHT_PORT": "9200"})
    assert settings.port == 9200
    assert settings.device == "GPU"
    assert settings.cpu.properties() == {"ENABLE_CPU_PINNING": False, "INFERENCE_NUM_THREADS": 2}


def test_pinning_can_be_left_to_openvino(tmp_path: Path) -> None:
    env = {"SIDELIGHT_HOME": str(tmp_path), "SIDELIGHT_CPU_PINNING": "auto"}
    assert load_settings(env).cpu.properties() == {}


def test_kv_precision_and_self_tune_settings(tmp_path: Path) -> None:
    home = {"SIDELIGHT_HOME": str(tmp_path)}
    cpu = load_settings(home).cpu
    assert cpu.self_tune is True and cpu.kv_cache_precision is None
    env = {**home, "SIDELIGHT_CPU_KV_CACHE_PRECISION": "F16", "SIDELIGHT_CPU_SELF_TUNE": "0"}
    cpu = load_settings(env).cpu
    assert cpu.self_tune is False
    assert cpu.properties() == {"ENABLE_CPU_PINNING": False, "KV_CACHE_PRECISION": "f16"}
    with pytest.raises(SettingsError, match="cpu_kv_cache_precision"):
        load_settings({**home, "SIDELIGHT_CPU_KV_CACHE_PRECISION": "int3"})


def test_bad_values_name_the_setting(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="port"):
        load_settings({"SIDELIGHT_HOME": str(tmp_path), "SIDELIGHT_PORT": "eighty"})
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.json").write_text("{not json")
    with pytest.raises(SettingsError, match=r"config\.json"):
        load_settings({"SIDELIGHT_HOME": str(tmp_path)})


def test_leaving_loopback_requires_an_api_key(tmp_path: Path) -> None:
    settings = load_settings({"SIDELIGHT_HOME": str(tmp_path), "SIDELIGHT_HOST": "0.0.0.0"})
    with pytest.raises(SettingsError, match="API key"):
        settings.validate()
    settings.with_overrides(api_key="secret").validate()


def test_extra_origins_extend_the_allowlist(tmp_path: Path) -> None:
    env = {"SIDELIGHT_HOME": str(tmp_path), "SIDELIGHT_ALLOWED_ORIGINS": "https://app\\.example"}
    origins = load_settings(env).allowed_origins
    assert origins[-1] == "https://app\\.example"
    assert any("localhost" in o for o in origins)


def test_every_key_load_settings_reads_can_be_saved(tmp_path: Path) -> None:
    """save_config refuses unknown keys, so each key read from the file must be allowed."""
    home = {"SIDELIGHT_HOME": str(tmp_path)}
    paths = load_settings(home).paths
    save_config(paths, {"engine_below_normal": False, "stream_interval_ms": 0, "kv_cache_gb": 2})
    settings = load_settings(home)
    assert settings.engine_below_normal is False
    assert settings.stream_interval_ms == 0 and settings.kv_cache_gb == 2


def test_watchdog_bounds_come_from_env_or_file_and_must_make_sense(tmp_path: Path) -> None:
    home = {"SIDELIGHT_HOME": str(tmp_path)}
    defaults = load_settings(home)
    assert defaults.engine_watchdog_seconds > 0
    assert defaults.engine_load_timeout_seconds > defaults.engine_watchdog_seconds
    save_config(defaults.paths, {"engine_load_timeout_seconds": 600})
    settings = load_settings({**home, "SIDELIGHT_ENGINE_WATCHDOG_SECONDS": "0"})
    assert settings.engine_watchdog_seconds == 0  # off
    assert settings.engine_load_timeout_seconds == 600
    settings.validate()
    with pytest.raises(SettingsError, match="engine_watchdog_seconds"):
        load_settings({**home, "SIDELIGHT_ENGINE_WATCHDOG_SECONDS": "-1"}).validate()


def test_request_bodies_are_kept_only_when_switched_on(tmp_path: Path) -> None:
    env = {"SIDELIGHT_HOME": str(tmp_path)}
    assert load_settings(env).keep_request_bodies is False
    settings = load_settings(env)
    save_config(settings.paths, {"keep_request_bodies": True})
    assert load_settings(env).keep_request_bodies is True
    assert load_settings({**env, "SIDELIGHT_KEEP_REQUEST_BODIES": "0"}).keep_request_bodies is False
    with pytest.raises(SettingsError, match="keep_request_bodies"):
        load_settings({**env, "SIDELIGHT_KEEP_REQUEST_BODIES": "sometimes"})


def test_theme_follows_the_system_unless_chosen(tmp_path: Path) -> None:
    env = {"SIDELIGHT_HOME": str(tmp_path)}
    assert load_settings(env).theme == "system"
    paths = load_settings(env).paths
    save_config(paths, {"theme": "dark"})
    assert load_settings(env).theme == "dark"
    assert load_settings({**env, "SIDELIGHT_THEME": "Light"}).theme == "light"
    with pytest.raises(SettingsError, match="theme must be system, light or dark, got 'blue'"):
        load_settings({**env, "SIDELIGHT_THEME": "blue"})
