"""Model ids and the one place that turns an id into a path under the models folder.

Ids reach the store from the command line, the tray app and HTTP requests
(``/v1/models/{id}``, the ``model`` field). Each one is checked here before it touches the
file system: a plain name (letters, digits, ``.``, ``_``, ``-``), never ``..``, never a
separator or an absolute path, and the folder it names must not be a link that leads out of
the store. Ids are case-insensitive (stored lowercase) so ``Qwen2.5-1.5B`` finds
``qwen2.5-1.5b``.
"""

from __future__ import annotations

import re
from pathlib import Path

from engine.store.errors import InvalidModelId

_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
# Folders the store keeps for itself; never valid model ids.
RESERVED = frozenset({".partial", ".trash", ".locks"})


def normalize_id(model_id: str) -> str:
    """Return the canonical (lowercase) form of ``model_id``.

    Raises:
        InvalidModelId: the id could name a path outside the store or is malformed.
    """
    if not isinstance(model_id, str):
        raise InvalidModelId("a model id must be a string")
    candidate = model_id.strip().lower()
    if not _ID.fullmatch(candidate) or ".." in candidate:
        raise InvalidModelId(
            f"{model_id!r} is not a valid model id: use letters, digits, '.', '_' and '-' "
            "(no paths, no '..', at most 128 characters)"
        )
    return candidate


def id_from_name(name: str) -> str:
    """Derive a valid id from a repo, folder or file name (``Org/Model-Name`` -> ``model-name``)."""
    base = name.rstrip("/").rsplit("/", 1)[-1].lower()
    base = re.sub(r"[^a-z0-9._-]+", "-", base)
    base = re.sub(r"\.{2,}", ".", base).strip(".-_")[:128]
    return normalize_id(base or "model")


def model_folder(root: Path, model_id: str) -> Path:
    """The folder for ``model_id`` inside ``root``, refusing links that leave ``root``.

    The folder need not exist. A folder that exists must be a real directory whose resolved
    path sits directly in the resolved ``root``.

    Raises:
        InvalidModelId: the id is malformed or its folder escapes the store.
    """
    canonical = normalize_id(model_id)
    folder = root / canonical
    if folder.is_symlink():
        raise InvalidModelId(f"{model_id!r} is a link; the store does not follow links")
    if folder.exists() and folder.resolve().parent != root.resolve():
        raise InvalidModelId(f"{model_id!r} resolves outside the models folder")
    return folder


def inside(folder: Path, relative: str) -> Path:
    """``folder / relative`` when it stays inside ``folder`` (for manifest entries).

    Raises:
        InvalidModelId: ``relative`` is absolute, climbs out, or is a link out of ``folder``.
    """
    candidate = Path(relative)
    if candidate.is_absolute() or ".." in candidate.parts:
        raise InvalidModelId(f"{relative!r} is not a path inside the model folder")
    path = folder / candidate
    if path.exists() and not path.resolve().is_relative_to(folder.resolve()):
        raise InvalidModelId(f"{relative!r} leads outside the model folder")
    return path
