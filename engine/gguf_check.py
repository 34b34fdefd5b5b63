"""Check a whole GGUF file before GenAI opens it: header, metadata types and tensor layout.

GenAI maps tensor data where the table says it is, trusting offsets and sizes. A tensor that
ends past the end of the file, overlaps another, or sits at a misaligned offset makes the
engine worker crash or serve garbage, so :func:`check_gguf` refuses such a file with one
sentence first. It reads only the header (a few MB at most).

The result is cached per path under the file's :class:`~engine.file_key.FileKey` (size,
mtime, ctime, inode, device), so listing the store over and over costs a ``stat``; a file
rewritten in place with its size and mtime put back has a new ctime and is checked again.
Before a load, ``check_gguf(path, sampled=True)`` also compares a sampled digest (the whole
header and tensor table plus 16 chunks of the data, see :mod:`engine.file_key`) with the one
taken when the file was checked, and checks the whole file again when it differs: that
covers filesystems whose ctime means something else (Windows, FAT).

Threading: safe from any thread (the cache is a dict under a lock; checks run outside it).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.file_key import FileKey, sampled_digest
from engine.ggml_types import GGML_TYPES
from engine.gguf import (
    ARRAY,
    FLOATS,
    INTEGERS,
    INVALID,
    STRING,
    GGUFError,
    GGUFHeader,
    TensorInfo,
    read_header,
)

logger = logging.getLogger(__name__)

DEFAULT_ALIGNMENT = 32
_MAX_ALIGNMENT = 1 << 20
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1

# What well-known keys must hold. "{arch}" is the file's general.architecture.
_POSITIVE_INTS = (
    "{arch}.context_length",
    "{arch}.block_count",
    "{arch}.embedding_length",
    "general.alignment",
)
_INTS_OR_INT_ARRAYS = (
    "{arch}.feed_forward_length",
    "{arch}.attention.head_count",
    "{arch}.attention.head_count_kv",
)
_INTS = ("general.file_type", "general.quantization_version", "{arch}.rope.dimension_count")
_NUMBERS = (
    "{arch}.rope.freq_base",
    "{arch}.attention.layer_norm_rms_epsilon",
    "{arch}.attention.layer_norm_epsilon",
)
_STRINGS = (
    "general.architecture",
    "general.name",
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.chat_template",
)
_STRING_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges")
_INT_ARRAYS = ("tokenizer.ggml.token_type",)
_NUMBER_ARRAYS = ("tokenizer.ggml.scores",)
_NUMBER_TYPES = INTEGERS | FLOATS
Accepts = Callable[[int, Any], bool]  # (value type, value) -> whether the key may hold it
_EXPECTED: tuple[tuple[tuple[str, ...], Accepts, str], ...] = (
    (_STRINGS, lambda t, v: t == STRING, "text"),
    (_POSITIVE_INTS + _INTS, lambda t, v: t in INTEGERS, "an integer"),
    (
        _INTS_OR_INT_ARRAYS,
        lambda t, v: t in INTEGERS or _array_of(v) in INTEGERS,
        "an integer",
    ),
    (_NUMBERS, lambda t, v: t in _NUMBER_TYPES, "a number"),
    (_STRING_ARRAYS, lambda t, v: _array_of(v) == STRING, "an array of text"),
    (_INT_ARRAYS, lambda t, v: _array_of(v) in INTEGERS, "an array of integers"),
    (_NUMBER_ARRAYS, lambda t, v: _array_of(v) in _NUMBER_TYPES, "an array of numbers"),
)
_KINDS = {
    **{t: "an integer" for t in INTEGERS},
    **{t: "a floating-point number" for t in FLOATS},
    7: "a true/false value",
    STRING: "text",
}


def check_gguf(path: Path, *, sampled: bool = False) -> GGUFHeader:
    """Validate the whole GGUF file at ``path`` and return its header.

    Args:
        sampled: also compare the file's sampled digest with the one taken when it was
            last checked (a few MB read; use it right before a load), checking the file
            again when it differs.

    Raises:
        GGUFError: the file is damaged, truncated or not a GGUF file (one sentence saying
            what is wrong and, where it can, what to do).
    """
    key = _key(path)
    with _LOCK:
        known = _CHECKED.get(path)
    if known is not None and known.key == key:
        if not sampled or _sample(path, known.header) == known.sample:
            return known.header
        logger.warning("%s changed but kept its size and times: checking it again", path)
    header = _validate(path)
    checked = _Checked(key, header, _sample(path, header))
    if _key(path) == key:  # not changed while it was read: remember it
        with _LOCK:
            _CHECKED[path] = checked
            _CHECKED.move_to_end(path)
            while len(_CHECKED) > _CACHE_SIZE:
                _CHECKED.popitem(last=False)
    return header


def forget_checks() -> None:
    """Drop every cached check (tests; a store moved elsewhere)."""
    with _LOCK:
        _CHECKED.clear()


@dataclass(frozen=True)
class _Checked:
    key: FileKey
    header: GGUFHeader
    sample: str  # engine.file_key.sampled_digest of the file as it was checked


_CACHE_SIZE = 64
_CHECKED: OrderedDict[Path, _Checked] = OrderedDict()
_LOCK = threading.Lock()


def _key(path: Path) -> FileKey:
    try:
        return FileKey.of(path)
    except OSError as exc:
        raise GGUFError(f"cannot read {path.name}: {exc.strerror or exc}") from exc


def _sample(path: Path, header: GGUFHeader) -> str:
    try:
        return sampled_digest(path, header.header_size)
    except OSError as exc:
        raise GGUFError(f"cannot read {path.name}: {exc.strerror or exc}") from exc


def _validate(path: Path) -> GGUFHeader:
    header = read_header(path)
    problem = _metadata_problem(header) or _layout_problem(header)
    if problem:
        raise GGUFError(f"{path.name} {INVALID} {problem}")
    return header


def alignment(header: GGUFHeader) -> int:
    value = header.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    return int(value)


def _metadata_problem(header: GGUFHeader) -> str | None:
    meta, types = header.metadata, header.value_types
    arch = meta.get("general.architecture")
    arch = arch if isinstance(arch, str) else "general"
    for patterns, accepts, expected in _EXPECTED:
        for key in (p.format(arch=arch) for p in patterns):
            if key in meta and not accepts(types[key], meta[key]):
                return (
                    f"metadata '{key}' should be {expected} but is {_kind(types[key], meta[key])}"
                )
    for key in (p.format(arch=arch) for p in _POSITIVE_INTS):
        if key in meta and not 0 < meta[key] <= _INT32_MAX:
            return f"metadata '{key}' is {meta[key]}, outside 1..{_INT32_MAX}"
    align = alignment(header)
    if align > _MAX_ALIGNMENT or align & (align - 1):
        return f"metadata 'general.alignment' is {align}, not a power of two up to {_MAX_ALIGNMENT}"
    return None


def _layout_problem(header: GGUFHeader) -> str | None:
    """Tensor shapes, types, alignment and placement against the real file size."""
    if not header.tensors:
        return "it holds no tensors (only a header; the model's weights are missing)"
    align = alignment(header)
    data_start = _align_up(header.header_size, align)
    previous: tuple[str, int] | None = None  # name and end of the tensor before, by offset
    for tensor in sorted(header.tensors, key=lambda t: t.offset):
        problem = _tensor_problem(tensor, align)
        if problem:
            return problem
        start = data_start + tensor.offset
        end = start + GGML_TYPES[tensor.type_id].nbytes(math.prod(tensor.shape))
        if start >= header.file_size:
            return (
                f"tensor '{tensor.name}' starts at byte {start}, past the end of the file "
                f"({header.file_size} bytes; the download may be incomplete)"
            )
        if end > header.file_size:
            return (
                f"tensor '{tensor.name}' ends past the end of the file "
                "(the download may be incomplete)"
            )
        if previous is not None and start < previous[1]:
            return f"tensor '{tensor.name}' overlaps tensor '{previous[0]}'"
        previous = (tensor.name, end)
    return None


def _tensor_problem(tensor: TensorInfo, align: int) -> str | None:
    what = f"tensor '{tensor.name}'"
    kind = GGML_TYPES[tensor.type_id]
    if math.prod(tensor.shape) > _INT64_MAX:
        return f"{what} has a shape {list(tensor.shape)} too large to address"
    if tensor.shape[0] % kind.block_size:
        return (
            f"{what} has rows of {tensor.shape[0]} values, which do not fill whole "
            f"{kind.name} blocks of {kind.block_size}"
        )
    if tensor.offset % align:
        return f"{what} starts at offset {tensor.offset}, not a multiple of {align}"
    return None


def _kind(vtype: int, value: Any) -> str:
    if vtype == ARRAY:
        item = _array_of(value)
        return (
            f"an array of {_KINDS.get(item, 'something else')}" if item is not None else "an array"
        )
    return _KINDS.get(vtype, "something else")


def _array_of(value: Any) -> int | None:
    """The item type of a summarised array (``read_header`` keeps no array whole here)."""
    if isinstance(value, dict) and isinstance(value.get("array_of"), int):
        return int(value["array_of"])
    return None


def _align_up(offset: int, align: int) -> int:
    return (offset + align - 1) // align * align
