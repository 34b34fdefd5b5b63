"""Check a whole GGUF file before GenAI opens it: header, metadata types and tensor layout.

GenAI maps tensor data where the table says it is, trusting offsets and sizes. A tensor that
ends past the end of the file, overlaps another, or sits at a misaligned offset makes the
engine worker crash or serve garbage, so :func:`check_gguf` refuses such a file with one
sentence first. It reads only the header (a few MB at most); the result is cached per
(path, size, modification time), so listing the store over and over costs nothing.

Threading: safe from any thread (the cache is ``functools.lru_cache``, which is thread-safe).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def check_gguf(path: Path) -> GGUFHeader:
    """Validate the whole GGUF file at ``path`` and return its header.

    Raises:
        GGUFError: the file is damaged, truncated or not a GGUF file (one sentence saying
            what is wrong and, where it can, what to do).
    """
    try:
        stat = path.stat()
    except OSError as exc:
        raise GGUFError(f"cannot read {path.name}: {exc.strerror or exc}") from exc
    return _checked(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _checked(path: Path, size: int, mtime_ns: int) -> GGUFHeader:
    """``size`` and ``mtime_ns`` only key the cache: a changed file is checked again."""
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
