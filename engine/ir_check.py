"""Check an OpenVINO IR model folder before the engine opens it: its JSON and IR files.

GenAI reads ``config.json``, ``generation_config.json`` and ``tokenizer_config.json`` with a
C++ JSON parser and each ``.xml``/``.bin`` pair with OpenVINO's IR reader; a damaged one
fails the load with the library's own words (``[json.exception.parse_error.101]``,
``Exception from src/inference/src/cpp/core.cpp:84``), which say nothing a person can act
on. :func:`check_ir` finds those damages first and names the file and what is wrong:

- a JSON file GenAI or Sidelight reads that is empty, not UTF-8, not JSON or not an object;
- an IR ``.xml`` that is empty, not XML (cut short), or not an OpenVINO IR (no ``<net>``);
- its ``.bin`` missing, empty, shorter than the constants the ``.xml`` places in it, or of
  another size than they fill (OpenVINO writes the constants back to back, so a ``.bin``
  longer than they need belongs to another model).

What it cannot see: a ``.bin`` of exactly the right size holding other bytes. OpenVINO then
usually refuses the graph, and the worker answers that as damage too, without its internals.

The result is cached by the :class:`~engine.file_key.FileKey` of every file it read, so a
second check costs a few ``stat`` calls. XML is scanned with the standard library's expat,
building no tree; an IR declares no DTD, so one that does (entity expansion) is refused.

Threading: safe from any thread (the cache is a dict under a lock; checks run outside it).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from pathlib import Path
from xml.parsers import expat

from engine.file_key import FileKey

# JSON files a loader reads; a damaged one fails the load (or is silently ignored).
JSON_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.json",
    "openvino_config.json",
    "preprocessor_config.json",  # vision-language models: how images are sized; speech
    "processor_config.json",  # models: their feature extractor
)
IR_STEMS = (
    "openvino_model",
    "openvino_tokenizer",
    "openvino_detokenizer",
    # A vision-language export (optimum-intel's image-text-to-text): the language model,
    # the vision encoder, the text embeddings and each family's merger or resampler.
    "openvino_language_model",
    "openvino_vision_embeddings_model",
    "openvino_text_embeddings_model",
    "openvino_vision_embeddings_merger_model",
    "openvino_vision_embeddings_pos_model",
    "openvino_resampler_model",
    "openvino_multi_modal_projector_model",
    "openvino_vision_projection_model",
    "openvino_encoder_model",  # a speech model (Whisper): encoder and decoder
    "openvino_decoder_model",
    "openvino_postnet",  # a text-to-speech model (SpeechT5): beside encoder and decoder
    "openvino_vocoder",
)
_MAX_JSON_BYTES = 64 * 1024 * 1024
_CACHE_SIZE = 64


class IRError(ValueError):
    """A model folder's file is damaged; the message names the file and the damage."""


def check_ir(folder: Path) -> None:
    """Check the JSON and IR files of the model folder ``folder`` (see the module docstring).

    Raises:
        IRError: the first damaged file, named, with what is wrong with it.
    """
    key = _folder_key(folder)
    with _LOCK:
        if _CHECKED.get(folder) == key:
            return
    for name in JSON_FILES:
        _check_json(folder / name)
    for stem in IR_STEMS:
        _check_pair(folder, stem)
    if _folder_key(folder) == key:  # not changed while it was read
        with _LOCK:
            _CHECKED[folder] = key
            _CHECKED.move_to_end(folder)
            while len(_CHECKED) > _CACHE_SIZE:
                _CHECKED.popitem(last=False)


_CHECKED: OrderedDict[Path, tuple[FileKey | None, ...]] = OrderedDict()
_LOCK = threading.Lock()


def _folder_key(folder: Path) -> tuple[FileKey | None, ...]:
    names = [*JSON_FILES, *(f"{stem}{suffix}" for stem in IR_STEMS for suffix in (".xml", ".bin"))]
    return tuple(_key(folder / name) for name in names)


def _key(path: Path) -> FileKey | None:
    try:
        return FileKey.of(path)
    except OSError:
        return None


def _check_json(path: Path) -> None:
    if not path.is_file():
        return
    name = path.name
    try:
        if path.stat().st_size > _MAX_JSON_BYTES:
            raise IRError(f"{name} is larger than {_MAX_JSON_BYTES >> 20} MB")
        raw = path.read_bytes()
    except OSError as exc:
        raise IRError(f"{name} cannot be read ({exc.strerror or exc})") from exc
    if not raw.strip():
        raise IRError(f"{name} is empty")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise IRError(f"{name} is not UTF-8 text (byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise IRError(
            f"{name} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from exc
    except RecursionError as exc:
        raise IRError(f"{name} nests too deeply to be a model's configuration") from exc
    if not isinstance(data, dict):
        raise IRError(f"{name} does not hold a JSON object")


def _check_pair(folder: Path, stem: str) -> None:
    xml, weights = folder / f"{stem}.xml", folder / f"{stem}.bin"
    if not xml.is_file():
        return  # which files must exist is engine.models' check (a clearer sentence)
    end = _weights_end(xml)
    try:
        size = weights.stat().st_size if weights.is_file() else None
    except OSError as exc:
        raise IRError(f"{weights.name} cannot be read ({exc.strerror or exc})") from exc
    if end == 0:
        return  # no constants: the .bin may be absent
    if size is None:
        raise IRError(f"{weights.name} is missing ({xml.name} needs {end} bytes of weights)")
    if size == 0:
        raise IRError(f"{weights.name} is empty ({xml.name} needs {end} bytes of weights)")
    if size < end:
        raise IRError(
            f"{weights.name} is cut short: it holds {size} bytes, {xml.name} needs {end} "
            "(the download may be incomplete)"
        )
    if size > end:
        raise IRError(
            f"{weights.name} does not match {xml.name}: it holds {size} bytes, the weights "
            f"{xml.name} names end at byte {end} (the two files come from different models)"
        )


def _weights_end(xml: Path) -> int:
    """Where the last constant the IR places in its ``.bin`` ends (0: none).

    Raises:
        IRError: the file is empty, not XML, declares a DTD or entities, or is not an
            OpenVINO IR.
    """
    name = xml.name
    scan = _Scan(name)
    parser = expat.ParserCreate()
    parser.StartElementHandler = scan.start
    parser.StartDoctypeDeclHandler = scan.refuse_dtd
    parser.EntityDeclHandler = scan.refuse_dtd
    try:
        if xml.stat().st_size == 0:
            raise IRError(f"{name} is empty")
        with xml.open("rb") as fh:
            parser.ParseFile(fh)
    except expat.ExpatError as exc:
        raise IRError(
            f"{name} is not valid XML (line {exc.lineno}, column {exc.offset}: "
            f"{expat.ErrorString(exc.code)}; it may be cut short)"
        ) from exc
    except OSError as exc:
        raise IRError(f"{name} cannot be read ({exc.strerror or exc})") from exc
    return scan.end


class _Scan:
    """expat handlers: the root must be ``<net>``; each ``<data offset= size=>`` (a
    constant's place in the ``.bin``) moves the end. No tree is built."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.end = 0
        self._root = True

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        if self._root:
            self._root = False
            if tag != "net":
                raise IRError(f"{self.name} is not an OpenVINO IR (its root is <{tag}>, not <net>)")
        elif tag == "data" and "offset" in attrib:
            self.end = max(self.end, _constant_end(self.name, attrib))

    def refuse_dtd(self, *_: object) -> None:
        raise IRError(f"{self.name} declares a DTD or entities, which no OpenVINO IR does")


def _constant_end(name: str, attrib: dict[str, str]) -> int:
    try:
        offset, size = int(attrib["offset"]), int(attrib.get("size", "0"))
    except ValueError as exc:
        raise IRError(f"{name} places a constant at an offset that is not a number") from exc
    if offset < 0 or size < 0:
        raise IRError(f"{name} places a constant at a negative offset or size")
    return offset + size
