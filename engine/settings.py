"""Every setting Sidelight reads, in one place.

Values come, in order of precedence, from the environment (``SIDELIGHT_*``), then the
JSON config file in the config folder, then defaults. Paths come from platformdirs so a
Windows, macOS and Linux user each get the usual locations; ``SIDELIGHT_HOME`` moves all
of them under one folder for tests and portable installs.

Nothing else in the code base reads ``os.environ`` for Sidelight's own configuration.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast, get_args

import platformdirs

logger = logging.getLogger(__name__)

APP_NAME = "Sidelight"

# Ollama 11434, LM Studio 1234, Jan 1337, llama.cpp 8080 and OVMS 8000/9000 stay free.
DEFAULT_PORT = 11680
DEFAULT_HOST = "127.0.0.1"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_STREAM_INTERVAL_MS = 40
DEFAULT_SPECULATIVE_TOKENS = 4  # tokens guessed per step (see Settings.prompt_lookup)
MAX_SPECULATIVE_TOKENS = 16
# The engine watchdog: how long the worker may go without answering a ping before it is
# killed and restarted. One engine step (at most a chunk of a long prompt) takes seconds;
# loading a large model on a GPU the first time can take many minutes.
DEFAULT_ENGINE_WATCHDOG_SECONDS = 120.0
DEFAULT_ENGINE_LOAD_TIMEOUT_SECONDS = 1800.0
DEFAULT_IDLE_UNLOAD_SECONDS = 300.0

# Localhost pages and the VS Code family's webviews may call us from a browser context.
DEFAULT_ALLOWED_ORIGINS: tuple[str, ...] = (
    r"https?://localhost(:\d+)?",
    r"https?://127\.0\.0\.1(:\d+)?",
    r"https?://\[::1\](:\d+)?",
    r"vscode-webview://[a-z0-9-]+",
    r"vscode-file://vscode-app",
)


# The desktop's colours: follow the system's light/dark setting, or force one.
ThemeChoice = Literal["system", "light", "dark"]


class SettingsError(ValueError):
    """A setting has a value Sidelight cannot use; the message names it."""


@dataclass(frozen=True)
class Paths:
    """Folders Sidelight writes to. Created on demand by :meth:`ensure`."""

    config_dir: Path
    models_dir: Path
    cache_dir: Path
    log_dir: Path
    # What Sidelight keeps for the user beyond models: stored API responses.
    data_dir: Path
    # Where models lived before they moved to the data folder; set only when models_dir is
    # the platform default (a user-chosen folder is never migrated). See engine/store/relocate.
    legacy_models_dir: Path | None = None

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.json"

    @property
    def compile_cache_dir(self) -> Path:
        """OpenVINO's compiled-blob cache: makes the second GPU/NPU load fast."""
        return self.cache_dir / "compiled"

    @property
    def responses_dir(self) -> Path:
        """Stored OpenAI Responses (``store: true``), one JSON file each."""
        return self.data_dir / "responses"

    @property
    def lmstudio_chats_dir(self) -> Path:
        """Stored LM Studio ``/api/v1/chat`` conversations (``store: true``), one file each."""
        return self.data_dir / "lmstudio-chats"

    def ensure(self) -> None:
        for folder in (self.config_dir, self.models_dir, self.cache_dir, self.log_dir):
            folder.mkdir(parents=True, exist_ok=True)


@dataclass(frozen=True)
class CpuSettings:
    """CPU plugin properties. ``None`` leaves OpenVINO's choice.

    Pinning defaults to off: on small and shared machines (VMs, 2 cores) it made decoding
    several times slower, and on laptops with hybrid cores the OS schedules better.

    ``threads`` and ``kv_cache_precision`` left unset are chosen per machine by the CPU
    self-tune (:mod:`engine.cpu_tune`, when ``self_tune`` is on); a value set here always
    wins over the self-tune's choice.
    """

    pinning: bool | None = False
    threads: int | None = None
    kv_cache_precision: str | None = None  # "u8", "f16", "bf16", "f32"; None: tuned/OpenVINO
    self_tune: bool = True

    def properties(self) -> dict[str, Any]:
        """The explicitly set properties (what the user chose, before any self-tune)."""
        props: dict[str, Any] = {}
        if self.pinning is not None:
            props["ENABLE_CPU_PINNING"] = self.pinning
        if self.threads is not None:
            props["INFERENCE_NUM_THREADS"] = self.threads
        if self.kv_cache_precision is not None:
            props["KV_CACHE_PRECISION"] = self.kv_cache_precision
        return props


@dataclass(frozen=True)
class Settings:
    """Sidelight's configuration, immutable once read. Use :func:`load_settings`."""

    paths: Paths
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: str | None = None
    allowed_origins: tuple[str, ...] = DEFAULT_ALLOWED_ORIGINS
    allowed_hosts: tuple[str, ...] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    device: str = "CPU"
    cpu: CpuSettings = field(default_factory=CpuSettings)
    kv_cache_gb: float = 1.0  # the KV-cache budget; the served context is what fits in it
    # NPU: the static prompt length the pipeline is compiled for (a longer prompt is a 400)
    # and the room kept for the answer (GenAI's MAX_PROMPT_LEN / MIN_RESPONSE_LEN).
    npu_max_prompt_len: int = 4096
    npu_min_response_len: int = 512
    # Run inference below normal priority so the server and desktop answer at once.
    engine_below_normal: bool = True
    # Tokens that come faster than this are sent together (the first at once): each sent
    # delta wakes the server and the client, which on a small laptop steals time from the
    # inference threads. 0 sends every token alone.
    stream_interval_ms: int = DEFAULT_STREAM_INTERVAL_MS
    # Speculative decoding on the batched (CPU/GPU) pipeline. Prompt lookup guesses the next
    # tokens from n-grams of the prompt (pays when the reply copies the prompt: code edits,
    # rewrites, quotes; costs little otherwise); a catalog model's draft model (a small
    # model of the same family, when it is installed) guesses them instead when
    # ``draft_models`` is on. The model checks every guess, so greedy output is unchanged.
    # ``speculative_tokens`` is how many tokens are guessed per step (0 turns both off).
    # ``prompt_lookup`` None is ``auto``: on, except on a CPU where the self-tune measured a
    # step with guesses costing more than ``cpu_tune.LOOKUP_MAX_STEP_COST`` plain steps
    # (compute-bound int4 kernels: AVX2 without VNNI), where failed guesses slow every reply.
    prompt_lookup: bool | None = None
    draft_models: bool = True
    speculative_tokens: int = DEFAULT_SPECULATIVE_TOKENS
    # Seconds the engine worker may stay silent (no answer to a ping) before it is
    # restarted: while it serves (0 turns the watchdog off), and while a model loads.
    engine_watchdog_seconds: float = DEFAULT_ENGINE_WATCHDOG_SECONDS
    engine_load_timeout_seconds: float = DEFAULT_ENGINE_LOAD_TIMEOUT_SECONDS
    # Seconds a loaded model stays loaded with no request in flight before its worker
    # process ends and gives its memory back (Ollama's default: 5 minutes; a request's
    # keep_alive overrides it for that model). Negative: never unload for being idle.
    idle_unload_seconds: float = DEFAULT_IDLE_UNLOAD_SECONDS
    # Memory the loaded models may hold together (MB): models stay loaded side by side
    # while their measured worker memory fits it; a new model evicts the least recently
    # used idle ones. 0 (auto): total RAM minus a reserve for the OS and other apps
    # (the larger of 2 GB and a quarter of RAM). A model that fits nothing still loads
    # alone.
    memory_budget_mb: int = 0
    # Unload idle models (least recently used first, one every few seconds) while the
    # memory the system has available (MB) stays below this, so the laptop's other apps
    # are not pushed into swap. 0 (auto): 5 % of RAM, at least 512 MB and at most 2 GB;
    # negative: off. A model with a request in flight is never unloaded.
    memory_pressure_mb: int = 0
    # On battery, unload models once idle for a minute (the next request loads them
    # again). Off by default: reloading costs seconds on every first request.
    unload_on_battery: bool = False
    # Seconds a request waits for its model: for busy models to go idle when it needs their
    # room, then for the load; past it a 503 with Retry-After.
    load_wait_seconds: float = 20.0
    log_level: str = "INFO"
    # Model store: a hub token for gated/private repos (None lets huggingface_hub use its
    # own login), and the Python that runs conversions (None: this interpreter). A separate
    # interpreter lets the torch/optimum stack live outside the app's own environment.
    hf_token: str | None = None
    convert_python: Path | None = None
    # The request inspector keeps each request's body (which may hold code) in memory for
    # "copy as curl"; off by default, and bodies are never written to disk.
    keep_request_bodies: bool = False
    # The desktop app's colours: "system" follows the desktop's light/dark setting.
    theme: ThemeChoice = "system"

    def with_overrides(self, **changes: Any) -> Settings:
        """Return a copy with command-line overrides applied (``None`` values ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def device_properties(self, device: str) -> dict[str, Any]:
        """The OpenVINO properties a chat model is compiled with on ``device``."""
        kind = device.split(".", 1)[0].upper()
        if kind == "CPU":
            return self.cpu.properties()
        if kind == "NPU":
            return {
                "MAX_PROMPT_LEN": self.npu_max_prompt_len,
                "MIN_RESPONSE_LEN": self.npu_min_response_len,
            }
        return {}

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)

    def validate(self) -> None:
        """Refuse configurations that would be unsafe or cannot work."""
        if not 0 <= self.port < 65536:  # 0 lets the OS pick a free port
            raise SettingsError(f"port must be between 0 and 65535, got {self.port}")
        if not is_host_syntax(self.host):
            raise SettingsError(
                f"host must be an IP address or a host name (e.g. 127.0.0.1 or 0.0.0.0), "
                f"got {self.host!r}"
            )
        if self.api_key is not None:
            _check_api_key(self.api_key)
        if not self.is_loopback and not self.api_key:
            raise SettingsError(
                f"binding to {self.host} exposes the server beyond this machine; "
                "set an API key (--api-key or SIDELIGHT_API_KEY) to do that"
            )
        self._validate_limits()

    def _validate_limits(self) -> None:
        """Refuse numeric settings outside what the engine can run with."""
        if self.max_body_bytes < 1024:
            raise SettingsError("max_body_bytes must be at least 1024")
        if self.kv_cache_gb <= 0:
            raise SettingsError("kv_cache_gb must be positive")
        if not 16 <= self.npu_max_prompt_len <= 1 << 20:
            raise SettingsError("npu_max_prompt_len must be between 16 and 1048576")
        if not 1 <= self.npu_min_response_len <= 1 << 20:
            raise SettingsError("npu_min_response_len must be between 1 and 1048576")
        if not 0 <= self.stream_interval_ms <= 1000:
            raise SettingsError("stream_interval_ms must be between 0 and 1000")
        if not 0 <= self.speculative_tokens <= MAX_SPECULATIVE_TOKENS:
            raise SettingsError(
                f"speculative_tokens must be between 0 (off) and {MAX_SPECULATIVE_TOKENS}"
            )
        if self.engine_watchdog_seconds < 0:
            raise SettingsError("engine_watchdog_seconds must be 0 (off) or positive")
        if self.engine_load_timeout_seconds <= 0:
            raise SettingsError("engine_load_timeout_seconds must be positive")
        if not math.isfinite(self.idle_unload_seconds):
            raise SettingsError("idle_unload_seconds must be a number (negative: never unload)")
        if self.memory_budget_mb < 0:
            raise SettingsError("memory_budget_mb must be 0 (auto) or positive")
        if self.memory_pressure_mb > 1024 * 1024:
            raise SettingsError(
                "memory_pressure_mb must be MB: 0 (auto), negative (off) or at most 1048576"
            )
        if not 0 < self.load_wait_seconds < math.inf:
            raise SettingsError("load_wait_seconds must be a positive number")


def is_loopback_host(host: str) -> bool:
    """Whether binding to ``host`` keeps the server on this machine.

    A loopback address (``127.0.0.0/8``, ``::1``, ``[::1]``) or ``localhost``; a name that
    only looks like one (``127.evil.example``) is not.
    """
    text = host.strip().lower()
    if text == "localhost":
        return True
    try:
        return ipaddress.ip_address(text.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


_HOST_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", re.IGNORECASE)


def is_host_syntax(host: str) -> bool:
    """Whether ``host`` is an IP address (IPv6 with or without brackets) or a DNS name."""
    try:
        ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
        return True
    except ValueError:
        pass
    labels = host.split(".")
    return 0 < len(host) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels)


def _check_api_key(key: str) -> None:
    """An API key clients can send in a header: printable ASCII, no spaces, not empty."""
    if not key:
        raise SettingsError(
            "the API key is empty; give a key, or leave --api-key out to run without one"
        )
    if not all("!" <= ch <= "~" for ch in key):
        raise SettingsError(
            "the API key must be printable ASCII without spaces (it travels in an HTTP header)"
        )


def default_paths(env: Mapping[str, str]) -> Paths:
    home = env.get("SIDELIGHT_HOME")
    if home:
        root = Path(home).expanduser()
        base = Paths(root / "config", root / "models", root / "cache", root / "logs", root / "data")
    else:
        base = Paths(
            config_dir=Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)),
            # Models are large and precious: the data folder, not the cache cleaners empty.
            models_dir=Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)) / "models",
            cache_dir=Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)),
            log_dir=Path(platformdirs.user_log_dir(APP_NAME, appauthor=False)),
            data_dir=Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)),
        )
    return Paths(
        config_dir=_path(env, "SIDELIGHT_CONFIG_DIR", base.config_dir),
        models_dir=_path(env, "SIDELIGHT_MODELS_DIR", base.models_dir),
        cache_dir=_path(env, "SIDELIGHT_CACHE_DIR", base.cache_dir),
        log_dir=_path(env, "SIDELIGHT_LOG_DIR", base.log_dir),
        data_dir=_path(env, "SIDELIGHT_DATA_DIR", base.data_dir),
        legacy_models_dir=(
            None
            if home or "SIDELIGHT_MODELS_DIR" in env
            else Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)) / "models"
        ),
    )


def env_overrides(keys: Iterable[str], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Which of these ``config.json`` keys the environment sets, and by which variable.

    ``SIDELIGHT_<KEY>`` wins over ``config.json``, so a settings window must say so instead of
    saving a value that would never apply (the key ``models_dir`` is ``SIDELIGHT_MODELS_DIR``).
    """
    env = os.environ if env is None else env
    names = {key: f"SIDELIGHT_{key.upper()}" for key in keys}
    return {key: name for key, name in names.items() if name in env}


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read settings from the environment and the config file.

    Raises:
        SettingsError: a value cannot be parsed; the message names the variable or key.
    """
    env = os.environ if env is None else env
    paths = default_paths(env)
    file_values = _read_config_file(paths.config_file)
    if file_values.get("models_dir") and "SIDELIGHT_MODELS_DIR" not in env:
        paths = replace(
            paths,
            models_dir=Path(str(file_values["models_dir"])).expanduser(),
            legacy_models_dir=None,
        )

    def pick(name: str, key: str) -> Any:
        return env.get(name) if name in env else file_values.get(key)

    settings = Settings(paths=paths)
    origins = pick("SIDELIGHT_ALLOWED_ORIGINS", "allowed_origins")
    hosts = pick("SIDELIGHT_ALLOWED_HOSTS", "allowed_hosts")
    return settings.with_overrides(
        host=_str(pick("SIDELIGHT_HOST", "host")),
        port=_int(pick("SIDELIGHT_PORT", "port"), "port"),
        api_key=_str(pick("SIDELIGHT_API_KEY", "api_key")) or None,
        allowed_origins=(
            settings.allowed_origins + _list(origins) if origins is not None else None
        ),
        allowed_hosts=_list(hosts) if hosts is not None else None,
        max_body_bytes=_int(pick("SIDELIGHT_MAX_BODY_BYTES", "max_body_bytes"), "max_body_bytes"),
        device=_str(pick("SIDELIGHT_DEVICE", "device")),
        kv_cache_gb=_float(pick("SIDELIGHT_KV_CACHE_GB", "kv_cache_gb"), "kv_cache_gb"),
        npu_max_prompt_len=_int(
            pick("SIDELIGHT_NPU_MAX_PROMPT_LEN", "npu_max_prompt_len"), "npu_max_prompt_len"
        ),
        npu_min_response_len=_int(
            pick("SIDELIGHT_NPU_MIN_RESPONSE_LEN", "npu_min_response_len"),
            "npu_min_response_len",
        ),
        engine_below_normal=_bool(
            pick("SIDELIGHT_ENGINE_BELOW_NORMAL", "engine_below_normal"),
            "engine_below_normal",
            True,
        ),
        stream_interval_ms=_int(
            pick("SIDELIGHT_STREAM_INTERVAL_MS", "stream_interval_ms"), "stream_interval_ms"
        ),
        prompt_lookup=_bool(
            pick("SIDELIGHT_PROMPT_LOOKUP", "prompt_lookup"), "prompt_lookup", None
        ),
        draft_models=_bool(pick("SIDELIGHT_DRAFT_MODELS", "draft_models"), "draft_models", True),
        speculative_tokens=_int(
            pick("SIDELIGHT_SPECULATIVE_TOKENS", "speculative_tokens"), "speculative_tokens"
        ),
        engine_watchdog_seconds=_float(
            pick("SIDELIGHT_ENGINE_WATCHDOG_SECONDS", "engine_watchdog_seconds"),
            "engine_watchdog_seconds",
        ),
        engine_load_timeout_seconds=_float(
            pick("SIDELIGHT_ENGINE_LOAD_TIMEOUT_SECONDS", "engine_load_timeout_seconds"),
            "engine_load_timeout_seconds",
        ),
        idle_unload_seconds=_float(
            pick("SIDELIGHT_IDLE_UNLOAD_SECONDS", "idle_unload_seconds"), "idle_unload_seconds"
        ),
        memory_budget_mb=_int(
            pick("SIDELIGHT_MEMORY_BUDGET_MB", "memory_budget_mb"), "memory_budget_mb"
        ),
        memory_pressure_mb=_int(
            pick("SIDELIGHT_MEMORY_PRESSURE_MB", "memory_pressure_mb"), "memory_pressure_mb"
        ),
        unload_on_battery=_bool(
            pick("SIDELIGHT_UNLOAD_ON_BATTERY", "unload_on_battery"), "unload_on_battery", False
        ),
        load_wait_seconds=_float(
            pick("SIDELIGHT_LOAD_WAIT_SECONDS", "load_wait_seconds"), "load_wait_seconds"
        ),
        log_level=_str(pick("SIDELIGHT_LOG_LEVEL", "log_level")),
        hf_token=_str(pick("SIDELIGHT_HF_TOKEN", "hf_token")) or None,
        convert_python=_opt_path(pick("SIDELIGHT_CONVERT_PYTHON", "convert_python")),
        keep_request_bodies=_bool(
            pick("SIDELIGHT_KEEP_REQUEST_BODIES", "keep_request_bodies"),
            "keep_request_bodies",
            False,
        ),
        theme=_theme(pick("SIDELIGHT_THEME", "theme")),
        cpu=CpuSettings(
            pinning=_bool(pick("SIDELIGHT_CPU_PINNING", "cpu_pinning"), "cpu_pinning", False),
            threads=_int(pick("SIDELIGHT_CPU_THREADS", "cpu_threads"), "cpu_threads"),
            kv_cache_precision=_kv_precision(
                pick("SIDELIGHT_CPU_KV_CACHE_PRECISION", "cpu_kv_cache_precision")
            ),
            self_tune=bool(
                _bool(pick("SIDELIGHT_CPU_SELF_TUNE", "cpu_self_tune"), "cpu_self_tune", True)
            ),
        ),
    )


CONFIG_KEYS = frozenset(
    {
        "host",
        "port",
        "api_key",
        "allowed_origins",
        "allowed_hosts",
        "max_body_bytes",
        "device",
        "kv_cache_gb",
        "npu_max_prompt_len",
        "npu_min_response_len",
        "engine_below_normal",
        "stream_interval_ms",
        "prompt_lookup",
        "draft_models",
        "speculative_tokens",
        "engine_watchdog_seconds",
        "engine_load_timeout_seconds",
        "idle_unload_seconds",
        "memory_budget_mb",
        "load_wait_seconds",
        "log_level",
        "hf_token",
        "convert_python",
        "keep_request_bodies",
        "cpu_pinning",
        "cpu_threads",
        "cpu_kv_cache_precision",
        "cpu_self_tune",
        "models_dir",
        "theme",
    }
)


def save_config(paths: Paths, values: Mapping[str, Any]) -> None:
    """Merge ``values`` into the config file (a ``None`` value removes its key).

    Keys this module does not read are refused, so a typo cannot be saved silently. The file
    is replaced atomically. Environment variables still win over what is saved here.

    Raises:
        SettingsError: an unknown key, or the existing file is unreadable.
        OSError: the file cannot be written.
    """
    unknown = sorted(set(values) - CONFIG_KEYS)
    if unknown:
        raise SettingsError(f"unknown config keys: {', '.join(unknown)}")
    data = _read_config_file(paths.config_file)
    for key, value in values.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = list(value) if isinstance(value, tuple) else value
    paths.config_dir.mkdir(parents=True, exist_ok=True)
    tmp = paths.config_file.with_name(f".{paths.config_file.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if os.name != "nt":
        os.chmod(tmp, 0o600)  # it may hold an API key or a hub token
    os.replace(tmp, paths.config_file)


def _read_config_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SettingsError(f"cannot read config file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path} must hold a JSON object")
    return data


def _path(env: Mapping[str, str], name: str, default: Path) -> Path:
    value = env.get(name)
    return Path(value).expanduser() if value else default


def _opt_path(value: Any) -> Path | None:
    return Path(str(value)).expanduser() if value else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


KV_CACHE_PRECISIONS = ("u8", "f16", "bf16", "f32")


def _kv_precision(value: Any) -> str | None:
    text = _str(value)
    if not text:
        return None
    if text.lower() not in KV_CACHE_PRECISIONS:
        raise SettingsError(
            f"cpu_kv_cache_precision must be one of {', '.join(KV_CACHE_PRECISIONS)}, not {text!r}"
        )
    return text.lower()


def _int(value: Any, key: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{key} must be an integer, got {value!r}") from exc


def _float(value: Any, key: str) -> float | None:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{key} must be a number, got {value!r}") from exc


def _bool(value: Any, key: str, default: bool | None) -> bool | None:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    if text in {"auto", "default"}:
        return None
    raise SettingsError(f"{key} must be true, false or auto, got {value!r}")


def _theme(value: Any) -> ThemeChoice | None:
    if value is None or value == "":
        return None
    text = str(value).strip().lower()
    if text not in get_args(ThemeChoice):
        raise SettingsError(f"theme must be system, light or dark, got {value!r}")
    return cast(ThemeChoice, text)


def _list(value: Any) -> tuple[str, ...]:
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value)
    return tuple(part.strip() for part in str(value).split(",") if part.strip())
