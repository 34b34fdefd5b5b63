"""Every setting Sidelight reads, in one place.

Values come, in order of precedence, from the environment (``SIDELIGHT_*``), then the
JSON config file in the config folder, then defaults. Paths come from platformdirs so a
Windows, macOS and Linux user each get the usual locations; ``SIDELIGHT_HOME`` moves all
of them under one folder for tests and portable installs.

Each setting is declared once, as a field of :class:`Settings` (or of its group
:class:`CpuSettings`, or a folder of :class:`Paths`) with its default, its parser and its
check; :data:`SETTINGS` is the table read from those declarations, and loading, validation,
the keys :func:`save_config` accepts and the environment variable of each key all come from
it. How names follow from a field, and the folders' exception: :mod:`engine.settings_table`.

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
from typing import Any, Final, Literal, cast, get_args

import platformdirs

from engine.settings_table import (
    DEFAULT,
    Folder,
    KeepDefault,
    Setting,
    SettingsError,
    build,
    env_name,
    folder,
    folders,
    group,
    parse_bool,
    parse_float,
    parse_int,
    parse_list,
    parse_optional_path,
    parse_optional_text,
    parse_text,
    parse_tristate,
    refuse,
    setting,
    table,
)

# The public names (Setting, Folder and SettingsError are engine.settings_table's).
__all__ = [
    "APP_NAME",
    "CONFIG_KEYS",
    "DEFAULT_ALLOWED_ORIGINS",
    "DEFAULT_CRASH_WINDOW_SECONDS",
    "DEFAULT_ENGINE_LOAD_TIMEOUT_SECONDS",
    "DEFAULT_ENGINE_WATCHDOG_SECONDS",
    "DEFAULT_HOST",
    "DEFAULT_IDLE_UNLOAD_SECONDS",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_PORT",
    "DEFAULT_SPECULATIVE_TOKENS",
    "DEFAULT_STALL_SECONDS",
    "DEFAULT_STREAM_INTERVAL_MS",
    "FOLDERS",
    "HOME_ENV",
    "KV_CACHE_PRECISIONS",
    "MAX_SPECULATIVE_TOKENS",
    "SETTINGS",
    "CpuSettings",
    "Folder",
    "Paths",
    "Setting",
    "Settings",
    "SettingsError",
    "ThemeChoice",
    "default_paths",
    "env_overrides",
    "is_host_syntax",
    "is_loopback_host",
    "load_settings",
    "save_config",
]

logger = logging.getLogger(__name__)

APP_NAME = "Sidelight"
HOME_ENV: Final = "SIDELIGHT_HOME"  # moves every folder; a variable with no config.json key

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
# A ping unanswered this long makes /health say ``stalled`` (docs/security.md: the worker
# answers between steps; measured steps stay far below it, see bench/ping_bench.py).
DEFAULT_STALL_SECONDS = 10.0
DEFAULT_CRASH_WINDOW_SECONDS = 60.0
DEFAULT_IDLE_UNLOAD_SECONDS = 300.0

# Localhost pages and the VS Code family's webviews may call us from a browser context.
DEFAULT_ALLOWED_ORIGINS: tuple[str, ...] = (
    r"https?://localhost(:\d+)?",
    r"https?://127\.0\.0\.1(:\d+)?",
    r"https?://\[::1\](:\d+)?",
    r"vscode-webview://[a-z0-9-]+",
    r"vscode-file://vscode-app",
)

KV_CACHE_PRECISIONS = ("u8", "f16", "bf16", "f32")

# The desktop's colours: follow the system's light/dark setting, or force one.
ThemeChoice = Literal["system", "light", "dark"]


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


# Parsers and checks of single settings (the shared ones are in engine.settings_table).


def _check_api_key(key: str | None, name: str) -> None:
    """An API key clients can send in a header: printable ASCII, no spaces, not empty."""
    if key is None:
        return
    if not key:
        raise SettingsError(
            "the API key is empty; give a key, or leave --api-key out to run without one"
        )
    if not all("!" <= ch <= "~" for ch in key):
        raise SettingsError(
            "the API key must be printable ASCII without spaces (it travels in an HTTP header)"
        )


def _extra_origins(raw: object, key: str) -> tuple[str, ...]:
    """Origins given in the environment or the file are added to the default ones."""
    return DEFAULT_ALLOWED_ORIGINS + parse_list(raw, key)


def _kv_precision(raw: object, key: str) -> str | KeepDefault:
    text = str(raw)
    if not text:
        return DEFAULT
    if text.lower() not in KV_CACHE_PRECISIONS:
        raise SettingsError(f"{key} must be one of {', '.join(KV_CACHE_PRECISIONS)}, not {text!r}")
    return text.lower()


def _theme(raw: object, key: str) -> ThemeChoice | KeepDefault:
    if raw == "":
        return DEFAULT
    text = str(raw).strip().lower()
    if text not in get_args(ThemeChoice):
        raise SettingsError(f"{key} must be system, light or dark, got {raw!r}")
    return cast(ThemeChoice, text)


@dataclass(frozen=True)
class Paths:
    """Folders Sidelight writes to. Created on demand by :meth:`ensure`.

    Each folder is ``SIDELIGHT_<FOLDER>`` in the environment (over ``SIDELIGHT_HOME``, over the
    platform's default); only the models folder may also be chosen in ``config.json``.
    """

    config_dir: Path = field(metadata=folder())
    models_dir: Path = field(metadata=folder(in_config_file=True))
    cache_dir: Path = field(metadata=folder())
    log_dir: Path = field(metadata=folder())
    # What Sidelight keeps for the user beyond models: stored API responses.
    data_dir: Path = field(metadata=folder())
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
        for folder_path in (self.config_dir, self.models_dir, self.cache_dir, self.log_dir):
            folder_path.mkdir(parents=True, exist_ok=True)


@dataclass(frozen=True)
class CpuSettings:
    """CPU plugin properties (``cpu_*`` keys). ``None`` leaves OpenVINO's choice.

    Pinning defaults to off: on small and shared machines (VMs, 2 cores) it made decoding
    several times slower, and on laptops with hybrid cores the OS schedules better.

    ``threads`` and ``kv_cache_precision`` left unset are chosen per machine by the CPU
    self-tune (:mod:`engine.cpu_tune`, when ``self_tune`` is on); a value set here always
    wins over the self-tune's choice.
    """

    pinning: bool | None = setting(False, parse_tristate)  # auto: OpenVINO's choice
    threads: int | None = setting(None, parse_int)
    # "u8", "f16", "bf16", "f32"; None: tuned/OpenVINO
    kv_cache_precision: str | None = setting(None, _kv_precision)
    self_tune: bool = setting(True, parse_bool)

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
    """Sidelight's configuration, immutable once read. Use :func:`load_settings`.

    Every field but ``paths`` is a setting: ``setting(default, parser, check)``, where the
    check (run by :meth:`validate`) refuses values the engine cannot run with.
    """

    paths: Paths
    host: str = setting(
        DEFAULT_HOST,
        parse_text,
        refuse(
            lambda v: not is_host_syntax(v),
            "must be an IP address or a host name (e.g. 127.0.0.1 or 0.0.0.0), got {value!r}",
        ),
    )
    # 0 lets the OS pick a free port.
    port: int = setting(
        DEFAULT_PORT,
        parse_int,
        refuse(lambda v: not 0 <= v < 65536, "must be between 0 and 65535, got {value}"),
    )
    api_key: str | None = setting(None, parse_optional_text, _check_api_key)
    allowed_origins: tuple[str, ...] = setting(DEFAULT_ALLOWED_ORIGINS, _extra_origins)
    allowed_hosts: tuple[str, ...] = setting((), parse_list)
    max_body_bytes: int = setting(
        DEFAULT_MAX_BODY_BYTES, parse_int, refuse(lambda v: v < 1024, "must be at least 1024")
    )
    # Speech uploads (/v1/audio): the largest audio file (the body limit caps it too) and
    # the longest audio, decoded (16 kHz float32: 64 KB a second).
    max_audio_bytes: int = setting(
        DEFAULT_MAX_BODY_BYTES, parse_int, refuse(lambda v: v < 1024, "must be at least 1024")
    )
    max_audio_seconds: float = setting(
        900.0, parse_float, refuse(lambda v: not 1 <= v <= 14400, "must be between 1 and 14400")
    )
    device: str = setting("CPU", parse_text)
    cpu: CpuSettings = group(CpuSettings)
    # The KV-cache budget; the served context is what fits in it.
    kv_cache_gb: float = setting(1.0, parse_float, refuse(lambda v: v <= 0, "must be positive"))
    # NPU: the static prompt length the pipeline is compiled for (a longer prompt is a 400)
    # and the room kept for the answer (GenAI's MAX_PROMPT_LEN / MIN_RESPONSE_LEN).
    npu_max_prompt_len: int = setting(
        4096, parse_int, refuse(lambda v: not 16 <= v <= 1 << 20, "must be between 16 and 1048576")
    )
    npu_min_response_len: int = setting(
        512, parse_int, refuse(lambda v: not 1 <= v <= 1 << 20, "must be between 1 and 1048576")
    )
    # Run inference below normal priority so the server and desktop answer at once.
    engine_below_normal: bool = setting(True, parse_bool)
    # Tokens that come faster than this are sent together (the first at once): each sent
    # delta wakes the server and the client, which on a small laptop steals time from the
    # inference threads. 0 sends every token alone.
    stream_interval_ms: int = setting(
        DEFAULT_STREAM_INTERVAL_MS,
        parse_int,
        refuse(lambda v: not 0 <= v <= 1000, "must be between 0 and 1000"),
    )
    # Speculative decoding on the batched (CPU/GPU) pipeline. Prompt lookup guesses the next
    # tokens from n-grams of the prompt (pays when the reply copies the prompt: code edits,
    # rewrites, quotes; costs little otherwise); a catalog model's draft model (a small
    # model of the same family, when it is installed) guesses them instead when
    # ``draft_models`` is on. The model checks every guess, so greedy output is unchanged.
    # ``speculative_tokens`` is how many tokens are guessed per step (0 turns both off).
    # ``prompt_lookup`` None is ``auto``: on, except on a CPU where the self-tune measured a
    # step with guesses costing more than ``cpu_tune.LOOKUP_MAX_STEP_COST`` plain steps
    # (compute-bound int4 kernels: AVX2 without VNNI), where failed guesses slow every reply.
    prompt_lookup: bool | None = setting(None, parse_tristate)
    draft_models: bool = setting(True, parse_bool)
    speculative_tokens: int = setting(
        DEFAULT_SPECULATIVE_TOKENS,
        parse_int,
        refuse(
            lambda v: not 0 <= v <= MAX_SPECULATIVE_TOKENS,
            f"must be between 0 (off) and {MAX_SPECULATIVE_TOKENS}",
        ),
    )
    # Seconds the engine worker may stay silent (no answer to a ping) before it is
    # restarted: while it serves (0 turns the watchdog off), and while a model loads.
    engine_watchdog_seconds: float = setting(
        DEFAULT_ENGINE_WATCHDOG_SECONDS,
        parse_float,
        refuse(lambda v: v < 0, "must be 0 (off) or positive"),
    )
    engine_load_timeout_seconds: float = setting(
        DEFAULT_ENGINE_LOAD_TIMEOUT_SECONDS,
        parse_float,
        refuse(lambda v: v <= 0, "must be positive"),
    )
    # Seconds a serving worker may leave a ping unanswered before /health and /metrics say
    # ``stalled`` (a report only; the watchdog above decides the kill). 0 turns it off.
    stall_seconds: float = setting(
        DEFAULT_STALL_SECONDS,
        parse_float,
        refuse(lambda v: not 0 <= v < math.inf, "must be 0 (off) or a positive number"),
    )
    # The crash budget's window: after MAX_CONSECUTIVE_CRASHES crashes within it automatic
    # restarts pause, and they resume on their own one window after the last crash.
    crash_window_seconds: float = setting(
        DEFAULT_CRASH_WINDOW_SECONDS,
        parse_float,
        refuse(lambda v: not 0 < v < math.inf, "must be a positive number"),
    )
    # Seconds a loaded model stays loaded with no request in flight before its worker
    # process ends and gives its memory back (Ollama's default: 5 minutes; a request's
    # keep_alive overrides it for that model). Negative: never unload for being idle.
    idle_unload_seconds: float = setting(
        DEFAULT_IDLE_UNLOAD_SECONDS,
        parse_float,
        refuse(lambda v: not math.isfinite(v), "must be a number (negative: never unload)"),
    )
    # Memory the loaded models may hold together (MB): models stay loaded side by side
    # while their measured worker memory fits it; a new model evicts the least recently
    # used idle ones. 0 (auto): total RAM minus a reserve for the OS and other apps
    # (the larger of 2 GB and a quarter of RAM). A model that fits nothing still loads
    # alone.
    memory_budget_mb: int = setting(
        0, parse_int, refuse(lambda v: v < 0, "must be 0 (auto) or positive")
    )
    # Unload idle models (least recently used first, one every few seconds) while the
    # memory the system has available (MB) stays below this, so the laptop's other apps
    # are not pushed into swap. 0 (auto): 5 % of RAM, at least 512 MB and at most 2 GB;
    # negative: off. A model with a request in flight is never unloaded.
    memory_pressure_mb: int = setting(
        0,
        parse_int,
        refuse(
            lambda v: v > 1024 * 1024, "must be MB: 0 (auto), negative (off) or at most 1048576"
        ),
    )
    # On battery, unload models once idle for a minute (the next request loads them
    # again). Off by default: reloading costs seconds on every first request.
    unload_on_battery: bool = setting(False, parse_bool)
    # Seconds a request waits for its model: for busy models to go idle when it needs their
    # room, then for the load; past it a 503 with Retry-After.
    load_wait_seconds: float = setting(
        20.0, parse_float, refuse(lambda v: not 0 < v < math.inf, "must be a positive number")
    )
    # Remote servers (``sidelight remote add``): seconds to connect to one, and the longest
    # silence while its answer streams (the prefill counts: a slow remote is a 504 past it);
    # how often each remote's model list is read again, and how many of its models are
    # taken from one listing (a server listing thousands is cut there, and says so).
    remote_connect_timeout_seconds: float = setting(
        5.0, parse_float, refuse(lambda v: not 0 < v <= 600, "must be between 0 and 600")
    )
    remote_read_timeout_seconds: float = setting(
        120.0, parse_float, refuse(lambda v: not 0 < v <= 3600, "must be between 0 and 3600")
    )
    remote_refresh_seconds: float = setting(
        30.0, parse_float, refuse(lambda v: not 0.2 <= v <= 86400, "must be 0.2 to 86400")
    )
    remote_max_models: int = setting(
        256, parse_int, refuse(lambda v: not 1 <= v <= 10000, "must be between 1 and 10000")
    )
    log_level: str = setting("INFO", parse_text)
    # Model store: a hub token for gated/private repos (None lets huggingface_hub use its
    # own login), and the Python that runs conversions (None: this interpreter). A separate
    # interpreter lets the torch/optimum stack live outside the app's own environment.
    hf_token: str | None = setting(None, parse_optional_text)
    convert_python: Path | None = setting(None, parse_optional_path)
    # The request inspector keeps each request's body (which may hold code) in memory for
    # "copy as curl"; off by default, and bodies are never written to disk.
    keep_request_bodies: bool = setting(False, parse_bool)
    # The desktop app's colours: "system" follows the desktop's light/dark setting.
    theme: ThemeChoice = setting("system", _theme)

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
        """Refuse configurations that would be unsafe or cannot work: each setting's own
        check in declaration order, then the rule that spans two of them."""
        for row in SETTINGS:
            row.validate(self)
        if not self.is_loopback and not self.api_key:
            raise SettingsError(
                f"binding to {self.host} exposes the server beyond this machine; "
                "set an API key (--api-key or SIDELIGHT_API_KEY) to do that"
            )


# The table: every setting, with its config.json key and environment variable.
SETTINGS: Final[tuple[Setting, ...]] = table(Settings)
FOLDERS: Final[tuple[Folder, ...]] = folders(Paths)
# What save_config accepts: every setting's key, and the folders that have one.
CONFIG_KEYS: Final = frozenset(
    [row.key for row in SETTINGS] + [f.key for f in FOLDERS if f.key is not None]
)


def default_paths(env: Mapping[str, str]) -> Paths:
    home = env.get(HOME_ENV)
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
    chosen = {f.name: _path(env, f.env, getattr(base, f.name)) for f in FOLDERS}
    return Paths(
        **chosen,
        legacy_models_dir=(
            None
            if home or env_name("models_dir") in env
            else Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)) / "models"
        ),
    )


def env_overrides(keys: Iterable[str], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Which of these ``config.json`` keys the environment sets, and by which variable.

    ``SIDELIGHT_<KEY>`` wins over ``config.json``, so a settings window must say so instead of
    saving a value that would never apply (the key ``models_dir`` is ``SIDELIGHT_MODELS_DIR``).
    """
    env = os.environ if env is None else env
    names = {key: env_name(key) for key in keys}
    return {key: name for key, name in names.items() if name in env}


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read settings from the environment and the config file.

    Raises:
        SettingsError: a value cannot be parsed; the message names the variable or key.
    """
    env = os.environ if env is None else env
    paths = default_paths(env)
    file_values = _read_config_file(paths.config_file)
    chosen = {
        f.name: Path(str(file_values[f.key])).expanduser()
        for f in FOLDERS
        if f.key is not None and file_values.get(f.key) and f.env not in env
    }
    if chosen:  # the models folder: one the user chose is never migrated
        paths = replace(paths, **chosen, legacy_models_dir=None)

    def pick(row: Setting) -> object:
        return env.get(row.env) if row.env in env else file_values.get(row.key)

    return build(Settings, {row.path: row.read(pick(row)) for row in SETTINGS}, paths=paths)


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
