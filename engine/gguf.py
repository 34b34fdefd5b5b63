"""Read a GGUF file's header (metadata and tensor table) without loading its tensors.

GenAI's GGUF reader trusts every number in a file: a huge tensor count, a shape of 2^31
dimensions or a tensor placed past the end of the file crashes the engine worker, and a file
cut short loads and serves garbage. So nothing here trusts the file either: every count and
length is checked against the bytes that are really there before anything is allocated,
arrays of arrays (which no GGUF loader supports) are refused rather than recursed into, and
each refusal is one sentence naming what is wrong. Whole-file checks (tensor data inside the
file, alignment, overlaps) live in :mod:`engine.gguf_check`.

The file is read through a small window with ordinary reads (not ``mmap``), so a file that
shrinks while it is read raises an error instead of a SIGBUS.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from engine.ggml_types import GGML_TYPES

GGUF_MAGIC = b"GGUF"
INVALID = "is not a valid GGUF file:"  # "<file name> is not a valid GGUF file: <reason>"
SUPPORTED_VERSIONS = (2, 3)
MAX_DIMS = 4  # ggml tensors have at most four dimensions

# GGUF value types (gguf spec): scalar formats, then the two compound types.
SCALARS: dict[int, str] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
STRING = 8
ARRAY = 9
INTEGERS = frozenset({0, 1, 2, 3, 4, 5, 10, 11})
FLOATS = frozenset({6, 12})

_MAX_KEY = 65535  # the spec's limit for a key
_MAX_STRING = 64 * 1024 * 1024
_MAX_KVS = 1 << 20
_MAX_TENSORS = 1 << 20
_MIN_KV_BYTES = 8 + 4 + 1  # key length, value type, one byte of value
_MIN_TENSOR_BYTES = 8 + 4 + 8 + 4 + 8  # name length, n_dims, one dim, type, offset
_WINDOW = 1024 * 1024
_PAST_END = "but the file ends before that (it is damaged or incomplete)"


class GGUFError(ValueError):
    """The file is not a GGUF file Sidelight can read; the message says why, in one sentence."""


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table: where a tensor's data is and how it is laid out."""

    name: str
    shape: tuple[int, ...]  # ggml order: the row length first
    type_id: int
    offset: int  # from the start of the data region


@dataclass(frozen=True)
class GGUFHeader:
    """Everything before a GGUF file's tensor data."""

    version: int
    metadata: dict[str, Any]  # large arrays as {"array_of": type, "length": n} unless kept
    value_types: dict[str, int]  # the GGUF value type each key was written with
    tensors: tuple[TensorInfo, ...]
    header_size: int  # bytes up to the end of the tensor table
    file_size: int


def read_header(path: Path, *, keep_arrays: Collection[str] | bool = ()) -> GGUFHeader:
    """Parse the metadata and tensor table of ``path``, checking every count and length.

    Args:
        path: the ``.gguf`` file.
        keep_arrays: keys whose arrays are returned whole (``True``: all of them); the
            others are summarised as ``{"array_of": type, "length": n}``.

    Raises:
        GGUFError: not a GGUF file, or a damaged header (the message says what is wrong).
    """
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            return _Parser(_Cursor(fh, size), keep_arrays).header()
    except _Bad as exc:
        raise GGUFError(f"{path.name} {exc}") from None
    except OSError as exc:
        raise GGUFError(f"cannot read {path.name}: {exc.strerror or exc}") from exc


def read_metadata(
    path: Path, *, skip_arrays: bool = True, keep_arrays: Collection[str] = ()
) -> dict[str, Any]:
    """Return the GGUF key/value metadata, plus ``GGUF.version``.

    Args:
        path: the ``.gguf`` file.
        skip_arrays: leave large arrays (the vocabulary) out, storing their length instead.
        keep_arrays: keys whose arrays are kept whole even with ``skip_arrays``.

    Raises:
        GGUFError: not a GGUF file, or a truncated/corrupt header.
    """
    header = read_header(path, keep_arrays=True if not skip_arrays else keep_arrays)
    return {"GGUF.version": header.version, **header.metadata}


class _Bad(Exception):
    """A reason the file is refused, completing the sentence "<file name> ..."."""


def _invalid(reason: str) -> _Bad:
    return _Bad(f"{INVALID} {reason}")


def _cut(what: str) -> _Bad:
    return _invalid(f"the file ends in the middle of {what} (the download may be incomplete)")


class _Cursor:
    """Sequential reads through a window of the file, never past its size."""

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self._fh = fh
        self.size = size
        self.pos = 0
        self._window = b""
        self._window_at = 0

    def left(self) -> int:
        return self.size - self.pos

    def take(self, n: int, what: str) -> bytes:
        offset = self._ensure(n, what)
        return self._window[offset : offset + n]

    def unpack(self, fmt: str, what: str) -> Any:
        size = struct.calcsize(fmt)
        offset = self._ensure(size, what)
        return struct.unpack_from(fmt, self._window, offset)[0]

    def skip(self, n: int, what: str) -> None:
        if n > self.left():
            raise _cut(what)
        self.pos += n

    def _ensure(self, n: int, what: str) -> int:
        """Make ``n`` bytes from ``pos`` readable; return their offset in the window."""
        if n > self.left():
            raise _cut(what)
        end = self.pos + n
        if self.pos < self._window_at or end > self._window_at + len(self._window):
            self._fh.seek(self.pos)
            self._window = self._fh.read(max(n, _WINDOW))
            self._window_at = self.pos
            if len(self._window) < n:  # the file shrank while we read it
                raise _cut(what)
        offset = self.pos - self._window_at
        self.pos = end
        return offset


class _Parser:
    def __init__(self, cursor: _Cursor, keep_arrays: Collection[str] | bool) -> None:
        self._c = cursor
        self._keep = keep_arrays

    def header(self) -> GGUFHeader:
        c = self._c
        if c.size == 0:
            raise _Bad("is empty (0 bytes): the download or copy did not finish")
        if c.size < 4 or c.take(4, "the signature") != GGUF_MAGIC:
            raise _Bad("is not a GGUF file (it does not start with the GGUF signature)")
        version = c.unpack("<I", "the header")
        _check_version(version)
        tensor_count = c.unpack("<Q", "the header")
        kv_count = c.unpack("<Q", "the header")
        if kv_count > min(_MAX_KVS, c.left() // _MIN_KV_BYTES):
            raise _invalid(
                f"it claims {kv_count} metadata entries, more than the file can hold "
                "(it is damaged or incomplete)"
            )
        if tensor_count > min(_MAX_TENSORS, c.left() // _MIN_TENSOR_BYTES):
            raise _invalid(
                f"it claims {tensor_count} tensors, more than the file can hold "
                "(it is damaged or incomplete)"
            )
        metadata: dict[str, Any] = {}
        value_types: dict[str, int] = {}
        for index in range(kv_count):
            key = self._text(f"metadata key #{index + 1}", _MAX_KEY)
            if key in metadata:
                raise _invalid(f"metadata key '{key}' appears twice")
            vtype = c.unpack("<I", f"metadata '{key}'")
            value_types[key] = vtype
            keep = self._keep is True or (not isinstance(self._keep, bool) and key in self._keep)
            metadata[key] = self._value(key, vtype, keep)
        tensors = tuple(self._tensor(i) for i in range(tensor_count))
        names = set()
        for tensor in tensors:
            if tensor.name in names:
                raise _invalid(f"tensor '{tensor.name}' appears twice")
            names.add(tensor.name)
        return GGUFHeader(version, metadata, value_types, tensors, c.pos, c.size)

    def _text(self, what: str, limit: int) -> str:
        length = self._c.unpack("<Q", what)
        if length > min(limit, self._c.left()):
            raise _invalid(f"{what} claims a length of {length} bytes {_PAST_END}")
        try:
            return self._c.take(length, what).decode("utf-8")
        except UnicodeDecodeError:
            raise _invalid(f"{what} is not UTF-8 text") from None

    def _value(self, key: str, vtype: int, keep: bool) -> Any:
        c = self._c
        what = f"metadata '{key}'"
        if vtype in SCALARS:
            return c.unpack(SCALARS[vtype], what)
        if vtype == STRING:
            return self._text(what, _MAX_STRING)
        if vtype != ARRAY:
            raise _invalid(f"{what} has an unknown value type {vtype}")
        item_type = c.unpack("<I", what)
        count = c.unpack("<Q", what)
        if item_type == ARRAY:
            raise _invalid(f"{what} is an array of arrays, which GGUF loaders do not support")
        if item_type not in SCALARS and item_type != STRING:
            raise _invalid(f"{what} is an array of an unknown value type {item_type}")
        item_size = struct.calcsize(SCALARS[item_type]) if item_type in SCALARS else 8
        if count > c.left() // item_size:
            raise _invalid(f"{what} claims {count} items {_PAST_END}")
        if item_type in SCALARS:
            if not keep:
                c.skip(item_size * count, what)
                return {"array_of": item_type, "length": count}
            data = c.take(item_size * count, what)
            return list(struct.unpack(f"<{count}{SCALARS[item_type][1]}", data))
        return self._strings(what, count, keep)

    def _strings(self, what: str, count: int, keep: bool) -> Any:
        """An array of strings (a vocabulary): skipped cheaply unless kept."""
        c = self._c
        items: list[str] = []
        for _ in range(count):
            length = c.unpack("<Q", what)
            if length > c.left():
                raise _invalid(f"{what} holds a string of {length} bytes {_PAST_END}")
            if keep:
                # Vocabularies may hold partial UTF-8 sequences; loaders take raw bytes.
                items.append(c.take(length, what).decode("utf-8", errors="replace"))
            else:
                c.skip(length, what)
        return items if keep else {"array_of": STRING, "length": count}

    def _tensor(self, index: int) -> TensorInfo:
        c = self._c
        name = self._text(f"the name of tensor #{index + 1}", _MAX_KEY)
        what = f"tensor '{name}'"
        n_dims = c.unpack("<I", what)
        if not 1 <= n_dims <= MAX_DIMS:
            raise _invalid(f"{what} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
        shape = tuple(c.unpack("<Q", what) for _ in range(n_dims))
        if 0 in shape:
            raise _invalid(f"{what} has a dimension of size 0")
        type_id = c.unpack("<I", what)
        if type_id not in GGML_TYPES:
            raise _invalid(f"{what} uses an unknown ggml type {type_id}")
        offset = c.unpack("<Q", what)
        return TensorInfo(name, shape, type_id, offset)


def _check_version(version: int) -> None:
    if version in SUPPORTED_VERSIONS:
        return
    if int.from_bytes(version.to_bytes(4, "little"), "big") in SUPPORTED_VERSIONS:
        raise _Bad("is a big-endian GGUF file; Sidelight reads little-endian files only")
    if version == 1:
        raise _Bad(
            "uses GGUF version 1, which Sidelight cannot read: convert the model again "
            "with a current llama.cpp"
        )
    raise _Bad(
        f"uses GGUF version {version}; Sidelight reads versions 2 and 3 "
        "(the file is damaged, or newer than this Sidelight)"
    )
