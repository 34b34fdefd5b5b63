"""Craft GGUF files for tests: take a real, valid GGUF apart and write it back, changed.

:func:`parse` splits a file into its parts (metadata entries as raw bytes, the tensor table,
the data region); :meth:`GGUFParts.to_bytes` writes them back, byte for byte the same when
nothing changed. :data:`CRAFTED` lists damaged files, each made from a valid file by one
mutation, with a fragment of the message Sidelight must refuse it with.

The parser here is written independently of ``engine.gguf`` (it is what is under test) and
trusts its input: feed it only valid files.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

STRING, ARRAY, U32, U64, F32, BOOL = 8, 9, 4, 10, 6, 7
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


@dataclass
class KV:
    key: bytes
    vtype: int
    raw: bytes  # the value as written after its type


@dataclass
class Tensor:
    name: bytes
    dims: list[int]
    type_id: int
    offset: int


@dataclass
class GGUFParts:
    kvs: list[KV]
    tensors: list[Tensor]
    data: bytes  # everything from the (aligned) start of the data region
    magic: bytes = b"GGUF"
    version: int = 3
    alignment: int = 32  # how the data region is padded (not necessarily what the KV says)
    tensor_count: int | None = None  # written instead of len(tensors) when set
    kv_count: int | None = None
    endian: str = "<"
    raw_dims: dict[int, int] = field(default_factory=dict)  # tensor index -> n_dims written

    def kv(self, key: str) -> KV:
        return next(kv for kv in self.kvs if kv.key == key.encode())

    def set(self, key: str, vtype: int, raw: bytes) -> GGUFParts:
        """Set (or add) metadata ``key`` to a raw value of type ``vtype``."""
        kvs = [kv for kv in self.kvs if kv.key != key.encode()]
        index = next((i for i, kv in enumerate(self.kvs) if kv.key == key.encode()), len(kvs))
        kvs.insert(index, KV(key.encode(), vtype, raw))
        return replace(self, kvs=kvs)

    def drop(self, key: str) -> GGUFParts:
        return replace(self, kvs=[kv for kv in self.kvs if kv.key != key.encode()])

    def tensor(self, name: str) -> int:
        return next(i for i, t in enumerate(self.tensors) if t.name == name.encode())

    def with_tensor(self, index: int, **changes: object) -> GGUFParts:
        tensors = list(self.tensors)
        tensors[index] = replace(tensors[index], **changes)  # type: ignore[arg-type]
        return replace(self, tensors=tensors)

    def header_bytes(self) -> bytes:
        e = self.endian
        out = bytearray(self.magic)
        tensor_count = len(self.tensors) if self.tensor_count is None else self.tensor_count
        kv_count = len(self.kvs) if self.kv_count is None else self.kv_count
        out += struct.pack(f"{e}IQQ", self.version, tensor_count, kv_count)
        for kv in self.kvs:
            out += struct.pack(f"{e}Q", len(kv.key)) + kv.key + struct.pack(f"{e}I", kv.vtype)
            out += kv.raw
        for index, t in enumerate(self.tensors):
            out += struct.pack(f"{e}Q", len(t.name)) + t.name
            out += struct.pack(f"{e}I", self.raw_dims.get(index, len(t.dims)))
            out += b"".join(struct.pack(f"{e}Q", d) for d in t.dims)
            out += struct.pack(f"{e}IQ", t.type_id, t.offset)
        out += b"\0" * (-len(out) % self.alignment)
        return bytes(out)

    def to_bytes(self) -> bytes:
        return self.header_bytes() + self.data

    def write(self, path: Path) -> Path:
        path.write_bytes(self.to_bytes())
        return path


def string(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def u32(value: int) -> bytes:
    return struct.pack("<I", value)


def u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def parse(data: bytes) -> GGUFParts:
    """Split a valid GGUF file into parts (see the module docstring)."""
    assert data[:4] == b"GGUF"
    version, tensor_count, kv_count = struct.unpack_from("<IQQ", data, 4)
    pos = 24
    kvs = []
    for _ in range(kv_count):
        (length,) = struct.unpack_from("<Q", data, pos)
        key = data[pos + 8 : pos + 8 + length]
        (vtype,) = struct.unpack_from("<I", data, pos + 8 + length)
        start = pos + 12 + length
        pos = _skip_value(data, start, vtype)
        kvs.append(KV(key, vtype, data[start:pos]))
    tensors = []
    for _ in range(tensor_count):
        (length,) = struct.unpack_from("<Q", data, pos)
        name = data[pos + 8 : pos + 8 + length]
        pos += 8 + length
        (n_dims,) = struct.unpack_from("<I", data, pos)
        dims = list(struct.unpack_from(f"<{n_dims}Q", data, pos + 4))
        pos += 4 + 8 * n_dims
        type_id, offset = struct.unpack_from("<IQ", data, pos)
        pos += 12
        tensors.append(Tensor(name, dims, type_id, offset))
    parts = GGUFParts(kvs=kvs, tensors=tensors, data=b"", version=version)
    if any(kv.key == b"general.alignment" for kv in kvs):
        parts.alignment = struct.unpack("<I", parts.kv("general.alignment").raw)[0]
    data_start = pos + (-pos % parts.alignment)
    parts.data = data[data_start:]
    assert parts.to_bytes() == data, "the builder must write a valid file back unchanged"
    return parts


def _skip_value(data: bytes, pos: int, vtype: int) -> int:
    if vtype in _SCALAR_SIZES:
        return pos + _SCALAR_SIZES[vtype]
    if vtype == STRING:
        return pos + 8 + struct.unpack_from("<Q", data, pos)[0]
    assert vtype == ARRAY
    item_type, count = struct.unpack_from("<IQ", data, pos)
    pos += 12
    if item_type in _SCALAR_SIZES:
        return pos + _SCALAR_SIZES[item_type] * count
    for _ in range(count):
        pos = _skip_value(data, pos, item_type)
    return pos


def load(path: Path) -> GGUFParts:
    return parse(path.read_bytes())


def with_metadata(parts: GGUFParts, **meta: str | int) -> GGUFParts:
    """``parts`` with metadata set: ``general__architecture="llama"`` (``__`` is a dot).

    Changing the architecture renames the ``<arch>.`` keys too, so the file stays complete.
    """
    arch = meta.get("general__architecture")
    if isinstance(arch, str):
        old = parts.kv("general.architecture").raw[8:]
        renamed = [
            replace(kv, key=arch.encode() + kv.key[len(old) :])
            if kv.key.startswith(old + b".")
            else kv
            for kv in parts.kvs
        ]
        parts = replace(parts, kvs=renamed)
    for key, value in meta.items():
        name = key.replace("__", ".")
        parts = parts.set(name, STRING, string(value)) if isinstance(value, str) else parts
        parts = parts.set(name, U32, u32(value)) if isinstance(value, int) else parts
    return parts


# ---- the crafted kinds ---------------------------------------------------------------------

Craft = Callable[[GGUFParts], bytes]


def _bytes(parts: GGUFParts) -> bytes:
    return parts.to_bytes()


def _cut_tensor_table(parts: GGUFParts) -> bytes:
    header = parts.header_bytes()
    table_start = len(replace(parts, tensors=[], alignment=1).header_bytes())
    return header[: table_start + 20]


def _cut_mid_kv(parts: GGUFParts) -> bytes:
    header = parts.header_bytes()
    return header[: header.index(b"tokenizer.ggml.tokens") + 200]


def _nested(depth: int) -> bytes:
    inner = struct.pack("<IQ", U32, 0)
    for _ in range(depth - 1):
        inner = struct.pack("<IQ", ARRAY, 1) + inner
    return inner


def _second(parts: GGUFParts) -> int:
    """The tensor right after the first one in the data region."""
    ordered = sorted(range(len(parts.tensors)), key=lambda i: parts.tensors[i].offset)
    return ordered[1]


def _last(parts: GGUFParts) -> int:
    return max(range(len(parts.tensors)), key=lambda i: parts.tensors[i].offset)


CRAFTED: dict[str, tuple[Craft, str]] = {
    "empty file": (lambda p: b"", "is empty"),
    "bad magic": (lambda p: _bytes(replace(p, magic=b"GGML")), "is not a GGUF file"),
    "only the magic": (lambda p: b"GGUF", "ends in the middle of the header"),
    "version 0": (lambda p: _bytes(replace(p, version=0)), "GGUF version 0"),
    "version 1": (lambda p: _bytes(replace(p, version=1)), "GGUF version 1"),
    "version 99": (lambda p: _bytes(replace(p, version=99)), "GGUF version 99"),
    "big-endian": (lambda p: _bytes(replace(p, endian=">")), "big-endian"),
    "tensor count 2^63": (lambda p: _bytes(replace(p, tensor_count=1 << 63)), "tensors, more"),
    "tensor count one too many": (
        lambda p: _bytes(replace(p, tensor_count=len(p.tensors) + 1)),
        "the name of tensor #27",
    ),
    "kv count 2^64-1": (
        lambda p: _bytes(replace(p, kv_count=(1 << 64) - 1)),
        "metadata entries, more",
    ),
    "kv count one too many": (
        lambda p: _bytes(replace(p, kv_count=len(p.kvs) + 1)),
        "the file ends before that",
    ),
    "string length 2^62": (
        lambda p: _bytes(p.set("general.name", STRING, u64(1 << 62) + b"x")),
        "metadata 'general.name' claims a length",
    ),
    "key length 2^64-1": (
        lambda p: _bytes(p)[:24] + u64((1 << 64) - 1) + _bytes(p)[32:],  # the first key's length
        "metadata key #1 claims a length",
    ),
    "string array count overflow": (
        lambda p: _bytes(
            p.set("tokenizer.ggml.tokens", ARRAY, struct.pack("<IQ", STRING, 1 << 61))
        ),
        "metadata 'tokenizer.ggml.tokens' claims",
    ),
    "int array count overflow": (
        lambda p: _bytes(p.set("tokenizer.ggml.token_type", ARRAY, struct.pack("<IQ", 5, 1 << 62))),
        "metadata 'tokenizer.ggml.token_type' claims",
    ),
    "5,000 nested arrays": (
        lambda p: _bytes(p.set("general.nested", ARRAY, _nested(5000))),
        "array of arrays",
    ),
    "unknown value type": (
        lambda p: _bytes(p.set("general.odd", 13, u32(1))),
        "unknown value type 13",
    ),
    "array of an unknown type": (
        lambda p: _bytes(p.set("general.odd", ARRAY, struct.pack("<IQ", 99, 1) + b"\0" * 8)),
        "unknown value type 99",
    ),
    "unknown ggml type": (lambda p: _bytes(p.with_tensor(0, type_id=99)), "unknown ggml type 99"),
    "retired ggml type Q4_2": (
        lambda p: _bytes(p.with_tensor(0, type_id=4)),
        "unknown ggml type 4",
    ),
    "n_dims 0": (lambda p: _bytes(p.with_tensor(1, dims=[])), "has 0 dimensions"),
    "n_dims 5": (lambda p: _bytes(p.with_tensor(1, dims=[64, 1, 1, 1, 1])), "has 5 dimensions"),
    "n_dims 2^31": (
        lambda p: _bytes(replace(p, raw_dims={1: 1 << 31})),
        "has 2147483648 dimensions",
    ),
    "dimension 0": (lambda p: _bytes(p.with_tensor(0, dims=[64, 0])), "dimension of size 0"),
    "shape product overflow": (
        lambda p: _bytes(p.with_tensor(0, dims=[1 << 32, 1 << 32, 1 << 32, 2])),
        "too large to address",
    ),
    "rows not whole blocks": (
        lambda p: _bytes(p.with_tensor(0, type_id=12)),
        "do not fill whole Q4_K blocks",
    ),
    "offset past the end": (
        lambda p: _bytes(p.with_tensor(_last(p), offset=len(p.data) + 4096)),
        "past the end of the file",
    ),
    "offset 2^64-1": (
        lambda p: _bytes(p.with_tensor(0, offset=(1 << 64) - 1)),
        "not a multiple of 32",
    ),
    "offset 2^64-32 (aligned)": (
        lambda p: _bytes(p.with_tensor(0, offset=(1 << 64) - 32)),
        "past the end of the file",
    ),
    "misaligned offset": (
        lambda p: _bytes(p.with_tensor(_second(p), offset=p.tensors[_second(p)].offset + 2)),
        "not a multiple of 32",
    ),
    "overlapping tensors": (
        lambda p: _bytes(p.with_tensor(_second(p), offset=32)),
        "overlaps tensor",
    ),
    "duplicate tensor name": (
        lambda p: _bytes(p.with_tensor(1, name=p.tensors[0].name)),
        "tensor 'token_embd.weight' appears twice",
    ),
    "duplicate key": (
        lambda p: _bytes(replace(p, kvs=[*p.kvs, p.kv("general.name")])),
        "metadata key 'general.name' appears twice",
    ),
    "data cut in half": (
        lambda p: _bytes(replace(p, data=p.data[: len(p.data) // 2])),
        "the download may be incomplete",
    ),
    "last byte cut": (
        lambda p: _bytes(replace(p, data=p.data[:-1])),
        "ends past the end of the file (the download may be incomplete)",
    ),
    "no tensor data": (lambda p: _bytes(replace(p, data=b"")), "past the end of the file"),
    "no tensors at all": (
        lambda p: _bytes(replace(p, tensors=[], data=b"")),
        "it holds no tensors",
    ),
    "alignment 0": (
        lambda p: _bytes(p.set("general.alignment", U32, u32(0))),
        "'general.alignment' is 0",
    ),
    "alignment 48 (not a power of two)": (
        lambda p: _bytes(replace(p.set("general.alignment", U32, u32(48)), alignment=48)),
        "not a power of two",
    ),
    "alignment as text": (
        lambda p: _bytes(p.set("general.alignment", STRING, string("32"))),
        "'general.alignment' should be an integer but is text",
    ),
    "non-UTF-8 value": (
        lambda p: _bytes(p.set("general.name", STRING, string(b"Demo \xff\xfe"))),
        "metadata 'general.name' is not UTF-8",
    ),
    "non-UTF-8 key": (
        lambda p: _bytes(replace(p, kvs=[*p.kvs, KV(b"general.\xff\xfe", U32, u32(1))])),
        "metadata key #26 is not UTF-8",
    ),
    "non-UTF-8 tensor name": (
        lambda p: _bytes(p.with_tensor(0, name=b"token_embd.\xff")),
        "the name of tensor #1 is not UTF-8",
    ),
    "header cut mid-KV": (
        _cut_mid_kv,
        "'tokenizer.ggml.tokens' claims 931 items but the file ends",
    ),
    "header cut mid tensor table": (
        _cut_tensor_table,
        "the name of tensor #1 claims a length of 17 bytes but the file ends",
    ),
    "context_length as text": (
        lambda p: _bytes(p.set("qwen2.context_length", STRING, string("2048"))),
        "'qwen2.context_length' should be an integer but is text",
    ),
    "context_length 2^40": (
        lambda p: _bytes(p.set("qwen2.context_length", U64, u64(1 << 40))),
        "'qwen2.context_length' is 1099511627776",
    ),
    "block_count as float": (
        lambda p: _bytes(p.set("qwen2.block_count", F32, struct.pack("<f", 2.0))),
        "'qwen2.block_count' should be an integer but is a floating-point number",
    ),
    "block_count as bool": (
        lambda p: _bytes(p.set("qwen2.block_count", BOOL, b"\x01")),
        "'qwen2.block_count' should be an integer but is a true/false value",
    ),
    "architecture as a number": (
        lambda p: _bytes(p.set("general.architecture", U32, u32(2))),
        "'general.architecture' should be text but is an integer",
    ),
    "tokens as integers": (
        lambda p: _bytes(p.set("tokenizer.ggml.tokens", ARRAY, struct.pack("<IQI", U32, 1, 7))),
        "'tokenizer.ggml.tokens' should be an array of text",
    ),
    "rms epsilon as text": (
        lambda p: _bytes(p.set("qwen2.attention.layer_norm_rms_epsilon", STRING, string("1e-6"))),
        "should be a number but is text",
    ),
    "context_length as u64": (
        lambda p: _bytes(p.set("qwen2.context_length", U64, u64(2048))),
        "'qwen2.context_length' must be stored as a 32-bit integer",
    ),
    "missing head_count": (
        lambda p: _bytes(p.drop("qwen2.attention.head_count")),
        "metadata 'qwen2.attention.head_count' is missing",
    ),
    "missing layer tensor": (
        lambda p: _bytes(
            replace(p, tensors=[t for t in p.tensors if t.name != b"blk.1.attn_q.weight"])
        ),
        "tensor 'blk.1.attn_q.weight' is missing",
    ),
    "embedding width disagrees with token_embd": (
        lambda p: _bytes(p.set("qwen2.embedding_length", U32, u32(32))),
        "tensor 'token_embd.weight' has shape [64, 931], but the metadata says [32, 931]",
    ),
}
