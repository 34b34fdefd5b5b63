"""How a setting is declared, so each one is written once.

A setting is a dataclass field declared with :func:`setting` (its default, the parser that
reads it from the environment or ``config.json``, and an optional check run by
``Settings.validate``); a group of settings (``Settings.cpu``) is a field declared with
:func:`group`, and a folder of :class:`engine.settings.Paths` with :func:`folder`.
:func:`table` turns those declarations into :class:`Setting` rows, from which
:mod:`engine.settings` derives loading, validation, the keys ``save_config`` accepts and the
environment variable each key answers to.

Names follow from the field: the ``config.json`` key is the field name, prefixed by its
group's (``cpu`` + ``threads`` is ``cpu_threads``), and the variable is ``SIDELIGHT_`` and the
key in capitals (``SIDELIGHT_CPU_THREADS``). The one exception is the folders: each has its
variable, but only ``models_dir`` may also be set in ``config.json`` (the config folder holds
the file, and the others are the platform's to choose).

Everything here is immutable and read-only once imported; any thread may use it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final, Literal, TypeVar, cast

T = TypeVar("T")

ENV_PREFIX: Final = "SIDELIGHT_"


class SettingsError(ValueError):
    """A setting has a value Sidelight cannot use; the message names it."""


class _Default(enum.Enum):
    """A parser's answer for "not set": an empty value or ``auto``, which keep the default."""

    DEFAULT = enum.auto()


DEFAULT: Final = _Default.DEFAULT
KeepDefault = Literal[_Default.DEFAULT]
# A raw value (an environment string or a JSON value, never None) and the config key to name
# in errors -> the value, or DEFAULT to keep the default. (Typed loosely: mypy cannot tie a
# parser's result to the field's type; the round-trip test in tests/engine does.)
Parser = Callable[[object, str], object]
# A value and its config key; raises SettingsError when the value cannot work.
Check = Callable[[T, str], None]

_SETTING: Final = "sidelight.setting"
_GROUP: Final = "sidelight.group"
_FOLDER: Final = "sidelight.folder"


@dataclass(frozen=True)
class _Declaration:
    parse: Parser
    check: Check[Any] | None


@dataclass(frozen=True)
class Setting:
    """One row of the table: a setting, where it is read from, and how."""

    path: tuple[str, ...]  # attribute names from Settings: ("port",), ("cpu", "threads")
    default: object
    parse: Parser
    check: Check[Any] | None

    @property
    def key(self) -> str:
        """The ``config.json`` key (also what errors name)."""
        return "_".join(self.path)

    @property
    def env(self) -> str:
        """The environment variable, which wins over ``config.json``."""
        return env_name(self.key)

    def read(self, raw: object) -> object:
        """The value for ``raw`` (``None``: not set anywhere, the default)."""
        if raw is None:
            return self.default
        value = self.parse(raw, self.key)
        return self.default if value is DEFAULT else value

    def value_in(self, obj: object) -> object:
        """This setting's value in a ``Settings``."""
        for name in self.path:
            obj = getattr(obj, name)
        return obj

    def validate(self, obj: object) -> None:
        """Run this setting's check on its value in a ``Settings``."""
        if self.check is not None:
            self.check(self.value_in(obj), self.key)


@dataclass(frozen=True)
class Folder:
    """A folder of ``Paths``: its variable, and its ``config.json`` key if it has one."""

    name: str
    in_config_file: bool

    @property
    def env(self) -> str:
        return env_name(self.name)

    @property
    def key(self) -> str | None:
        return self.name if self.in_config_file else None


def env_name(key: str) -> str:
    """The environment variable for a ``config.json`` key."""
    return ENV_PREFIX + key.upper()


def setting(default: T, parse: Parser, check: Check[T] | None = None) -> T:
    """Declare a dataclass field as a setting (see the module docstring for its names)."""
    decl = _Declaration(parse, check)
    return field(default=default, metadata={_SETTING: decl})


def group(factory: Callable[[], T]) -> T:
    """Declare a field holding a dataclass of settings; its keys are prefixed by the field's."""
    return field(default_factory=factory, metadata={_GROUP: factory})


def folder(*, in_config_file: bool = False) -> dict[str, bool]:
    """The metadata of a ``Paths`` folder field: ``field(metadata=folder())``."""
    return {_FOLDER: in_config_file}


def table(cls: type[Any], prefix: tuple[str, ...] = ()) -> tuple[Setting, ...]:
    """The settings declared on ``cls`` and its groups, in declaration order."""
    rows: list[Setting] = []
    for f in fields(cls):
        if _SETTING in f.metadata:
            decl: _Declaration = f.metadata[_SETTING]
            rows.append(Setting((*prefix, f.name), f.default, decl.parse, decl.check))
        elif _GROUP in f.metadata:
            rows.extend(table(f.metadata[_GROUP], (*prefix, f.name)))
    return tuple(rows)


def folders(cls: type[Any]) -> tuple[Folder, ...]:
    """The folders declared on a ``Paths`` class."""
    return tuple(Folder(f.name, f.metadata[_FOLDER]) for f in fields(cls) if _FOLDER in f.metadata)


def build(cls: Callable[..., T], values: Mapping[tuple[str, ...], object], **fixed: object) -> T:
    """Make ``cls`` (a dataclass) from values keyed by :attr:`Setting.path`, groups included."""
    return cast(T, _build(cls, values, (), fixed))


def _build(
    cls: Any,
    values: Mapping[tuple[str, ...], object],
    prefix: tuple[str, ...],
    fixed: dict[str, object],
) -> object:
    kwargs = dict(fixed)
    for f in fields(cls):
        path = (*prefix, f.name)
        if _GROUP in f.metadata:
            kwargs[f.name] = _build(f.metadata[_GROUP], values, path, {})
        elif path in values:
            kwargs[f.name] = values[path]
    return cls(**kwargs)


# Parsers. A raw value is an environment string or a JSON value; each keeps the spellings
# both may use ("2", 2; "true", true).


def parse_text(raw: object, key: str) -> str:
    """Any value as text; an empty one is kept (and refused later where it cannot work)."""
    return str(raw)


def parse_optional_text(raw: object, key: str) -> str | KeepDefault:
    """Text, where an empty value means not set."""
    return str(raw) or DEFAULT


def parse_optional_path(raw: object, key: str) -> Path | KeepDefault:
    return Path(str(raw)).expanduser() if raw else DEFAULT


def parse_int(raw: object, key: str) -> int | KeepDefault:
    if raw == "":
        return DEFAULT
    try:
        return int(cast(Any, raw))
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{key} must be an integer, got {raw!r}") from exc


def parse_float(raw: object, key: str) -> float | KeepDefault:
    if raw == "":
        return DEFAULT
    try:
        return float(cast(Any, raw))
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{key} must be a number, got {raw!r}") from exc


def parse_tristate(raw: object, key: str) -> bool | KeepDefault | None:
    """On, off or ``auto`` (None: the code decides); empty keeps the default."""
    if raw == "":
        return DEFAULT
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    if text in {"auto", "default"}:
        return None
    raise SettingsError(f"{key} must be true, false or auto, got {raw!r}")


def parse_bool(raw: object, key: str) -> bool | KeepDefault:
    """On or off; empty or ``auto`` keeps the default."""
    value = parse_tristate(raw, key)
    return DEFAULT if value is None else value


def parse_list(raw: object, key: str) -> tuple[str, ...]:
    """A JSON list, or comma-separated text."""
    if isinstance(raw, list | tuple):
        return tuple(str(v) for v in raw)
    return tuple(part.strip() for part in str(raw).split(",") if part.strip())


# Checks, run by Settings.validate in declaration order.


def refuse(bad: Callable[[Any], bool], message: str) -> Check[Any]:
    """A check refusing the values ``bad`` picks: "<key> <message>" (``{value}`` filled in)."""

    def check(value: Any, key: str) -> None:
        if bad(value):
            raise SettingsError(f"{key} {message.format(value=value)}")

    return check
