"""The ggml tensor types a GGUF file may use, with the bytes each block of values takes.

A tensor's size on disk is not written in a GGUF file: a reader computes it from the tensor's
shape and type (``elements / block_size * type_size``). Sidelight checks every tensor against
the file before GenAI maps it, so the table must match ggml's own (``ggml.c``'s type traits,
mirrored by gguf-py's ``GGML_QUANT_SIZES``). Ids that ggml retired (4, 5, 31-33, 36-38) are
left out on purpose: no current writer produces them.
"""

from __future__ import annotations

from dataclasses import dataclass

_QK_K = 256  # values in one k-quant super-block


@dataclass(frozen=True)
class GGMLType:
    """One ggml tensor type: ``block_size`` values are stored in ``type_size`` bytes."""

    id: int
    name: str
    block_size: int
    type_size: int

    def nbytes(self, elements: int) -> int:
        """Bytes that ``elements`` values take (``elements`` is a multiple of the block size)."""
        return elements // self.block_size * self.type_size


def _types(*rows: tuple[int, str, int, int]) -> dict[int, GGMLType]:
    return {row[0]: GGMLType(*row) for row in rows}


GGML_TYPES: dict[int, GGMLType] = _types(
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 2 + 16),
    (3, "Q4_1", 32, 2 + 2 + 16),
    (6, "Q5_0", 32, 2 + 4 + 16),
    (7, "Q5_1", 32, 2 + 2 + 4 + 16),
    (8, "Q8_0", 32, 2 + 32),
    (9, "Q8_1", 32, 4 + 4 + 32),
    (10, "Q2_K", _QK_K, 2 + 2 + _QK_K // 16 + _QK_K // 4),
    (11, "Q3_K", _QK_K, 2 + _QK_K // 4 + _QK_K // 8 + 12),
    (12, "Q4_K", _QK_K, 2 + 2 + _QK_K // 2 + 12),
    (13, "Q5_K", _QK_K, 2 + 2 + _QK_K // 2 + _QK_K // 8 + 12),
    (14, "Q6_K", _QK_K, 2 + _QK_K // 2 + _QK_K // 4 + _QK_K // 16),
    (15, "Q8_K", _QK_K, 4 + _QK_K + _QK_K // 8),
    (16, "IQ2_XXS", _QK_K, 2 + _QK_K // 4),
    (17, "IQ2_XS", _QK_K, 2 + _QK_K // 4 + _QK_K // 32),
    (18, "IQ3_XXS", _QK_K, 2 + _QK_K // 4 + _QK_K // 8),
    (19, "IQ1_S", _QK_K, 2 + _QK_K // 8 + _QK_K // 16),
    (20, "IQ4_NL", 32, 2 + 16),
    (21, "IQ3_S", _QK_K, 2 + _QK_K // 4 + _QK_K // 8 + _QK_K // 32 + 4),
    (22, "IQ2_S", _QK_K, 2 + _QK_K // 4 + _QK_K // 16),
    (23, "IQ4_XS", _QK_K, 2 + 2 + _QK_K // 2 + _QK_K // 64),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", _QK_K, _QK_K // 8 + _QK_K // 16 + _QK_K // 32),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", _QK_K, 2 + 4 * 13),
    (35, "TQ2_0", _QK_K, 2 + 64),
    (39, "MXFP4", 32, 1 + 16),
)
