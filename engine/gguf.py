"""Read the metadata header of a GGUF file without loading its tensors.

Sidelight needs a GGUF's architecture, context length and quantization before handing it
to OpenVINO GenAI, so that an unsupported file is refused with a reason instead of failing
deep inside the loader. Only the key/value section is read; tensors are never touched.
"""

from __future__ import annotations

import struct
from collections.abc import Collection
from pathlib import Path
from typing import Any, BinaryIO

GGUF_MAGIC = b"GGUF"

# GGUF value types (gguf spec).
_SCALARS: dict[int, str] = {
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
_STRING = 8
_ARRAY = 9
_MAX_STRING = 64 * 1024 * 1024


class GGUFError(ValueError):
    """The file is not a GGUF file Sidelight can read."""


def read_metadata(
    path: Path, *, skip_arrays: bool = True, keep_arrays: Collection[str] = ()
) -> dict[str, Any]:
    """Return the GGUF key/value metadata.

    Args:
        path: the ``.gguf`` file.
        skip_arrays: leave large arrays (the vocabulary) out, storing their length instead.
        keep_arrays: keys whose arrays are kept whole even with ``skip_arrays``.

    Raises:
        GGUFError: not a GGUF file, or a truncated/corrupt header.
    """
    try:
        with path.open("rb") as fh:
            if fh.read(4) != GGUF_MAGIC:
                raise GGUFError(f"{path.name} is not a GGUF file (bad magic)")
            (version,) = _unpack(fh, "<I")
            if version < 2:
                raise GGUFError(f"{path.name} uses GGUF version {version}; version 2 or 3 needed")
            _unpack(fh, "<Q")  # tensor count
            (kv_count,) = _unpack(fh, "<Q")
            meta: dict[str, Any] = {"GGUF.version": version}
            for _ in range(kv_count):
                key = _read_string(fh)
                (vtype,) = _unpack(fh, "<I")
                meta[key] = _read_value(fh, vtype, skip_arrays and key not in keep_arrays)
            return meta
    except (struct.error, UnicodeDecodeError, MemoryError) as exc:
        raise GGUFError(f"{path.name} has a corrupt GGUF header: {exc}") from exc


def _unpack(fh: BinaryIO, fmt: str) -> tuple[Any, ...]:
    size = struct.calcsize(fmt)
    data = fh.read(size)
    if len(data) != size:
        raise GGUFError("unexpected end of file in GGUF header")
    return struct.unpack(fmt, data)


def _read_string(fh: BinaryIO) -> str:
    (length,) = _unpack(fh, "<Q")
    if length > _MAX_STRING:
        raise GGUFError("string in GGUF header is implausibly long")
    return fh.read(length).decode("utf-8")


def _read_value(fh: BinaryIO, vtype: int, skip_arrays: bool) -> Any:
    if vtype in _SCALARS:
        return _unpack(fh, _SCALARS[vtype])[0]
    if vtype == _STRING:
        return _read_string(fh)
    if vtype == _ARRAY:
        (item_type,) = _unpack(fh, "<I")
        (count,) = _unpack(fh, "<Q")
        if skip_arrays and item_type in _SCALARS:
            fh.seek(struct.calcsize(_SCALARS[item_type]) * count, 1)
            return {"array_of": item_type, "length": count}
        items = [_read_value(fh, item_type, skip_arrays) for _ in range(count)]
        return {"array_of": item_type, "length": count} if skip_arrays else items
    raise GGUFError(f"unknown GGUF value type {vtype}")
