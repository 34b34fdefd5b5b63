"""Settings: one place, environment over config file over defaults, unsafe values refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.settings import (
    CONFIG_KEYS,
    DEFAULT_ALLOWED_ORIGINS,
    DEFAULT_PORT,
    FOLDERS,
    HOME_ENV,
    SETTINGS,
    SettingsError,
    load_settings,
    save_config,
)


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


# A non-default value of every setting: as config.json holds it, as the environment spells
# it, and what Settings then holds. A new setting without a line here fails the tests below.
_SAMPLES: dict[str, tuple[object, str, object]] = {
    "host": ("0.0.0.0", "0.0.0.0", "0.0.0.0"),
    "port": (9123, "9123", 9123),
    "api_key": ("sk-test", "sk-test", "sk-test"),
    "allowed_origins": (
        ["https://app\\.example"],
        "https://app\\.example",
        (*DEFAULT_ALLOWED_ORIGINS, "https://app\\.example"),
    ),
    "allowed_hosts": (
        ["a.example", "b.example"],
        "a.example, b.example",
        ("a.example", "b.example"),
    ),
    "max_body_bytes": (4096, "4096", 4096),
    "max_audio_bytes": (8192, "8192", 8192),
    "max_audio_seconds": (60, "60", 60.0),
    "device": ("GPU.1", "GPU.1", "GPU.1"),
    "cpu_pinning": (True, "true", True),
    "cpu_threads": (3, "3", 3),
    "cpu_kv_cache_precision": ("f16", "F16", "f16"),
    "cpu_self_tune": (False, "off", False),
    "kv_cache_gb": (2.5, "2.5", 2.5),
    "npu_max_prompt_len": (2048, "2048", 2048),
    "npu_min_response_len": (256, "256", 256),
    "engine_below_normal": (False, "no", False),
    "stream_interval_ms": (0, "0", 0),
    "prompt_lookup": (True, "1", True),
    "draft_models": (False, "false", False),
    "speculative_tokens": (8, "8", 8),
    "engine_watchdog_seconds": (30.5, "30.5", 30.5),
    "engine_load_timeout_seconds": (600, "600", 600.0),
    "stall_seconds": (2.5, "2.5", 2.5),
    "crash_window_seconds": (5, "5", 5.0),
    "idle_unload_seconds": (-1, "-1", -1.0),
    "memory_budget_mb": (8192, "8192", 8192),
    "memory_pressure_mb": (-1, "-1", -1),
    "unload_on_battery": (True, "yes", True),
    "load_wait_seconds": (5, "5", 5.0),
    "remote_connect_timeout_seconds": (2, "2", 2.0),
    "remote_read_timeout_seconds": (30, "30", 30.0),
    "remote_refresh_seconds": (10, "10", 10.0),
    "remote_max_models": (50, "50", 50),
    "log_level": ("DEBUG", "DEBUG", "DEBUG"),
    "hf_token": ("hf_test", "hf_test", "hf_test"),
    "convert_python": (
        "/opt/convert/bin/python",
        "/opt/convert/bin/python",
        Path("/opt/convert/bin/python"),
    ),
    "keep_request_bodies": (True, "on", True),
    "theme": ("dark", "Dark", "dark"),
}


def test_every_setting_has_one_key_and_one_variable() -> None:
    """Keys and variables follow from the names, and no two settings share one."""
    keys = [row.key for row in SETTINGS]
    variables = [row.env for row in SETTINGS] + [f.env for f in FOLDERS] + [HOME_ENV]
    assert len(set(keys)) == len(keys)
    assert len(set(variables)) == len(variables)
    for row in SETTINGS:
        assert row.env == "SIDELIGHT_" + row.key.upper()
    assert [f.key for f in FOLDERS if f.key] == ["models_dir"]  # the documented exception
    assert set(keys) | {"models_dir"} == CONFIG_KEYS
    assert set(_SAMPLES) == set(keys), "give each new setting a sample value above"


def test_every_setting_round_trips_through_the_config_file(tmp_path: Path) -> None:
    """What save_config accepts, load_settings reads back: the four lists cannot drift."""
    home = {"SIDELIGHT_HOME": str(tmp_path)}
    paths = load_settings(home).paths
    save_config(paths, {key: saved for key, (saved, _, _) in _SAMPLES.items()})
    save_config(paths, {"models_dir": str(tmp_path / "elsewhere")})
    settings = load_settings(home)
    for row in SETTINGS:
        expected = _SAMPLES[row.key][2]
        assert expected != row.default, f"{row.key}: the sample must not be the default"
        assert row.value_in(settings) == expected, row.key
    assert settings.paths.models_dir == tmp_path / "elsewhere"
    assert settings.paths.legacy_models_dir is None
    settings.validate()


def test_every_setting_reads_from_its_variable(tmp_path: Path) -> None:
    env = {"SIDELIGHT_HOME": str(tmp_path)} | {row.env: _SAMPLES[row.key][1] for row in SETTINGS}
    settings = load_settings(env)
    for row in SETTINGS:
        assert row.value_in(settings) == _SAMPLES[row.key][2], row.env


def test_auto_keeps_the_default_of_an_on_off_setting(tmp_path: Path) -> None:
    env = {"SIDELIGHT_HOME": str(tmp_path)}
    for row in SETTINGS:
        if isinstance(row.default, bool) and row.key != "cpu_pinning":
            assert row.value_in(load_settings({**env, row.env: "auto"})) is row.default, row.key
    pinning = load_settings({**env, "SIDELIGHT_CPU_PINNING": "auto"}).cpu.pinning
    assert pinning is None  # a setting whose auto is a value of its own: OpenVINO's choice


def test_the_readme_lists_every_variable() -> None:
    """The README's Configuration section names each variable, and no variable that is gone."""
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Configuration", 1)[1].split("\n### ", 1)[0]
    listed = set(re.findall(r"SIDELIGHT_[A-Z_]+", section))
    known = {row.env for row in SETTINGS} | {f.env for f in FOLDERS} | {HOME_ENV}
    assert listed == known
