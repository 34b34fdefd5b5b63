"""What a loadable model is: an OpenVINO IR folder or a GGUF file, described by a ModelSpec.

The spec is small and picklable: the server process builds it from files on disk (no
OpenVINO import), and sends it to the engine worker, which loads it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.context_fit import KVDims, kv_dims_from_config, kv_dims_from_gguf
from engine.gguf import GGUFError, GGUFHeader
from engine.gguf_check import check_gguf
from engine.ir_check import IRError, check_ir
from engine.model_prefs import ModelPrefs
from engine.resources import demo_model_path

logger = logging.getLogger(__name__)

# Architectures and GGUF file types GenAI's GGUF reader handles (see DESIGN.md).
GGUF_ARCHITECTURES = frozenset({"llama", "qwen2", "qwen3"})
GGUF_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 7: "Q8_0", 14: "Q4_K_S", 15: "Q4_K_M", 18: "Q6_K"}

DEMO_MODEL_ID = "sidelight-demo"

ModelTask = Literal["chat", "embeddings", "rerank", "vision", "transcription", "speech"]
"""What a model serves: chat/completions (generative), ``/v1/embeddings`` (an encoder),
``/v1/rerank`` (a cross-encoder), chat with images (a vision-language model: generative,
it also reads images) or ``/v1/audio/transcriptions`` and ``translations`` (a speech
recogniser, Whisper) or ``/v1/audio/speech`` (text to speech, SpeechT5); the wire and
manifest value is the string."""
TASKS: tuple[ModelTask, ...] = (
    "chat",
    "embeddings",
    "rerank",
    "vision",
    "transcription",
    "speech",
)
GENERATIVE_TASKS: frozenset[ModelTask] = frozenset({"chat", "vision"})
"""The tasks chat, completions and every generating dialect serve."""

# An optimum-intel ``image-text-to-text`` export: the language model and the vision encoder
# beside each other (plus a text-embeddings model, and per family a merger/resampler).
VLM_LANGUAGE_MODEL = "openvino_language_model.xml"
VLM_VISION_MODEL = "openvino_vision_embeddings_model.xml"

# The files of a Whisper IR folder (optimum-intel's automatic-speech-recognition-with-past).
SPEECH_IR_FILES = (
    "openvino_encoder_model.xml",
    "openvino_encoder_model.bin",
    "openvino_decoder_model.xml",
    "openvino_decoder_model.bin",
    "openvino_tokenizer.xml",
    "openvino_detokenizer.xml",
)

# The files of a SpeechT5 IR folder (optimum-intel's text-to-audio, with its vocoder).
TEXT_SPEECH_IR_FILES = (
    "openvino_encoder_model.xml",
    "openvino_encoder_model.bin",
    "openvino_decoder_model.xml",
    "openvino_decoder_model.bin",
    "openvino_postnet.xml",
    "openvino_postnet.bin",
    "openvino_vocoder.xml",
    "openvino_vocoder.bin",
    "openvino_tokenizer.xml",
)

# Metadata keys and per-layer tensors GenAI's GGUF reader looks up without a fallback.
_GENAI_KEYS = (
    "{arch}.block_count",
    "{arch}.embedding_length",
    "{arch}.attention.head_count",
    "{arch}.attention.layer_norm_rms_epsilon",
    "tokenizer.ggml.tokens",
)
# Scalars GenAI reads through a fixed C type: a u64 or f64 value there fails to load.
_INT32 = frozenset({4, 5})  # GGUF uint32, int32
_GENAI_SCALARS = (
    *((key, _INT32, "a 32-bit integer") for key in _GENAI_KEYS[:3]),
    ("{arch}.attention.head_count_kv", _INT32, "a 32-bit integer"),
    ("{arch}.context_length", _INT32, "a 32-bit integer"),
    ("general.file_type", _INT32, "a 32-bit integer"),
    ("{arch}.attention.layer_norm_rms_epsilon", frozenset({6}), "a 32-bit float"),
    ("{arch}.rope.freq_base", frozenset({6}), "a 32-bit float"),
)
_GENAI_LAYER_TENSORS = (
    "attn_norm",
    "ffn_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
)


class ModelError(ValueError):
    """A path is not a model Sidelight can serve; the message says why."""


@dataclass(frozen=True)
class ModelSpec:
    """Everything the engine needs to load and describe one model."""

    id: str
    path: Path
    format: str  # "ir" or "gguf"
    context_length: int | None = None
    architecture: str | None = None
    is_demo: bool = False
    task: ModelTask = "chat"
    kv_dims: KVDims | None = None  # what sizes its KV cache (engine.context_fit)
    # A small model of the same vocabulary that guesses tokens for this one (speculative
    # decoding); set by the store from the catalog's ``draft`` when that model is installed.
    draft_path: Path | None = None
    # The model's own settings (engine.model_prefs): its load preferences and the sampling
    # a request that leaves a field out gets; the store reads them from settings.json.
    prefs: ModelPrefs = field(default_factory=ModelPrefs)

    def with_prefs(self, prefs: ModelPrefs) -> ModelSpec:
        """This spec with the model's own settings: a ``context_length`` there caps the
        context it is served with (the worker sizes its KV cache from ``context_length``)."""
        limit = prefs.context_length
        context = self.context_length
        if limit is not None:
            context = limit if context is None else min(context, limit)
        return dataclasses.replace(self, prefs=prefs, context_length=context)

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": str(self.path),
            "format": self.format,
            "context_length": self.context_length,
            "architecture": self.architecture,
            "demo": self.is_demo,
            "task": self.task,
        }


def spec_from_path(path: Path, model_id: str | None = None) -> ModelSpec:
    """Describe the model at ``path`` (an IR folder or a ``.gguf`` file).

    Raises:
        ModelError: the path does not exist or is not a servable model.
    """
    path = path.expanduser().resolve()
    if not path.exists():
        raise ModelError(f"no model at {path}")
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelError(f"{path.name}: a model file must be a .gguf file")
        return _gguf_spec(path, model_id or path.stem)
    return _ir_spec(path, model_id or path.name)


def verify_files(spec: ModelSpec) -> None:
    """Check a model's files right before they are loaded (the server before it asks a
    worker, the worker before GenAI opens them): a GGUF file whole, with its sampled digest
    compared (:func:`engine.gguf_check.check_gguf`); an IR folder's JSON and IR files
    (:func:`engine.ir_check.check_ir`). Both are cached by file identity, so a model loaded
    again costs a few ``stat`` calls and, for a GGUF, a few MB read.

    Raises:
        ModelError: a file is damaged (the message names it and says what is wrong).
    """
    try:
        if spec.format == "gguf":
            check_gguf(spec.path, sampled=True)
        else:
            check_ir(spec.path)
    except (GGUFError, IRError) as exc:
        raise ModelError(str(exc)) from exc


def is_vlm_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a vision-language export (language + vision models)."""
    return (folder / VLM_LANGUAGE_MODEL).is_file() and (folder / VLM_VISION_MODEL).is_file()


def _ir_spec(folder: Path, model_id: str) -> ModelSpec:
    if (folder / "openvino_encoder_model.xml").is_file():
        if (folder / "openvino_vocoder.xml").is_file():
            return _text_speech_spec(folder, model_id)
        return _speech_spec(folder, model_id)
    vlm = is_vlm_folder(folder)
    main = VLM_LANGUAGE_MODEL if vlm else "openvino_model.xml"
    needed = [main, main.removesuffix(".xml") + ".bin"]
    if vlm:
        needed += [VLM_VISION_MODEL, VLM_VISION_MODEL.removesuffix(".xml") + ".bin"]
    needed += ["openvino_tokenizer.xml", "openvino_detokenizer.xml"]
    missing = [name for name in needed if not (folder / name).is_file()]
    if missing:
        raise ModelError(
            f"{folder.name} is not an OpenVINO IR model folder (missing {', '.join(missing)})"
        )
    config = read_json(folder / "config.json")
    if vlm and not isinstance(config.get("vision_config"), dict):
        raise ModelError(
            f"{folder.name}: a vision-language folder needs a config.json with 'vision_config'"
        )
    text_config = config.get("text_config")
    sizes = {**text_config, **config} if isinstance(text_config, dict) else config
    context = _first_int(sizes, "max_position_embeddings", "n_positions", "max_sequence_length")
    return ModelSpec(
        id=model_id,
        path=folder,
        format="ir",
        context_length=context,
        architecture=str(config.get("model_type")) if config.get("model_type") else None,
        is_demo=folder == demo_model_path().resolve(),
        task=task_from_config(config),
        kv_dims=kv_dims_from_config(config),
    )


@dataclass(frozen=True)
class _AudioLayout:
    """An audio model's IR folder: its files, its one supported architecture, its task."""

    what: str  # "speech model", "text-to-speech"
    files: tuple[str, ...]
    task: ModelTask
    architecture: str
    family: str  # what an unsupported one is called in the refusal
    context_key: str  # the config's longest input


_SPEECH = _AudioLayout(
    "speech model",
    SPEECH_IR_FILES,
    "transcription",
    "whisper",
    "an encoder-decoder model",
    "max_target_positions",
)
_TEXT_SPEECH = _AudioLayout(
    "text-to-speech",
    TEXT_SPEECH_IR_FILES,
    "speech",
    "speecht5",
    "a text-to-speech model",
    "max_text_positions",
)


def _speech_spec(folder: Path, model_id: str) -> ModelSpec:
    """A speech recogniser's IR folder: an encoder and a decoder, and a Whisper config."""
    return _audio_spec(folder, model_id, _SPEECH)


def _text_speech_spec(folder: Path, model_id: str) -> ModelSpec:
    """A text-to-speech IR folder: encoder, decoder, postnet, vocoder, a SpeechT5 config."""
    return _audio_spec(folder, model_id, _TEXT_SPEECH)


def _audio_spec(folder: Path, model_id: str, layout: _AudioLayout) -> ModelSpec:
    missing = [name for name in layout.files if not (folder / name).is_file()]
    if missing:
        raise ModelError(
            f"{folder.name} is not an OpenVINO {layout.what} folder (missing {', '.join(missing)})"
        )
    config = read_json(folder / "config.json")
    if task_from_config(config) != layout.task:
        kind = config.get("model_type") or "unknown"
        raise ModelError(
            f"{folder.name}: {layout.family} of type '{kind}' is not supported "
            f"(supported: {layout.architecture})"
        )
    return ModelSpec(
        id=model_id,
        path=folder,
        format="ir",
        context_length=_first_int(config, layout.context_key),
        architecture=layout.architecture,
        task=layout.task,
    )


def _gguf_spec(file: Path, model_id: str) -> ModelSpec:
    try:
        header = check_gguf(file)  # the whole file, before GenAI trusts any of it
    except GGUFError as exc:
        raise ModelError(str(exc)) from exc
    meta = header.metadata
    arch = str(meta.get("general.architecture", "unknown"))
    if arch not in GGUF_ARCHITECTURES:
        raise ModelError(
            f"{file.name}: GGUF architecture '{arch}' is not supported "
            f"(supported: {', '.join(sorted(GGUF_ARCHITECTURES))})"
        )
    file_type = meta.get("general.file_type")
    if file_type is not None and int(file_type) not in GGUF_FILE_TYPES:
        raise ModelError(
            f"{file.name}: GGUF quantization type {file_type} is not supported "
            f"(supported: {', '.join(sorted(set(GGUF_FILE_TYPES.values())))})"
        )
    problem = _genai_gguf_problem(header, arch)
    if problem:
        raise ModelError(f"{file.name} cannot be served: {problem}")
    context = meta.get(f"{arch}.context_length")
    return ModelSpec(
        id=model_id,
        path=file,
        format="gguf",
        context_length=int(context) if context else None,
        architecture=arch,
        kv_dims=kv_dims_from_gguf(meta, arch),
    )


def _genai_gguf_problem(header: GGUFHeader, arch: str) -> str | None:
    """What GenAI's GGUF reader needs but this (structurally valid) file lacks.

    GenAI looks these keys and tensors up without checking they exist, and fails with a bare
    ``map::at``; a vocabulary that disagrees with the embedding table reads out of bounds.
    """
    meta = header.metadata
    for key in _GENAI_KEYS:
        if key.format(arch=arch) not in meta:
            return f"metadata '{key.format(arch=arch)}' is missing"
    for pattern, types, label in _GENAI_SCALARS:
        key = pattern.format(arch=arch)
        if key in meta and header.value_types[key] not in types:
            return f"metadata '{key}' must be stored as {label} (GenAI reads no other type there)"
    shapes = {t.name: t.shape for t in header.tensors}
    layers = int(meta[f"{arch}.block_count"])
    needed = ["token_embd.weight", "output_norm.weight"] + [
        f"blk.{i}.{part}.weight" for i in range(layers) for part in _GENAI_LAYER_TENSORS
    ]
    for name in needed:
        if name not in shapes:
            return f"tensor '{name}' is missing"
    vocab = meta["tokenizer.ggml.tokens"]
    width = int(meta[f"{arch}.embedding_length"])
    expected = (width, int(vocab["length"]) if isinstance(vocab, dict) else len(vocab))
    if shapes["token_embd.weight"] != expected:
        return (
            f"tensor 'token_embd.weight' has shape {list(shapes['token_embd.weight'])}, "
            f"but the metadata says {list(expected)}"
        )
    return None


def task_from_config(config: dict[str, Any]) -> ModelTask:
    """What a transformers ``config.json`` says a model serves.

    A config with a ``vision_config`` is a vision-language model (it chats and sees); a
    causal LM chats; a sequence classifier with one label is a cross-encoder reranker
    (its one logit scores a query-document pair); Whisper transcribes speech; any other
    architecture is an encoder used
    for embeddings. A config that names no architecture is taken for a chat model (the one
    Sidelight writes beside an imported GGUF names none).
    """
    if isinstance(config.get("vision_config"), dict):
        return "vision"
    architectures = [str(a) for a in config.get("architectures") or []]
    if config.get("model_type") == "whisper" or "WhisperForConditionalGeneration" in architectures:
        return "transcription"
    if config.get("model_type") == "speecht5" or "SpeechT5ForTextToSpeech" in architectures:
        return "speech"
    if not architectures or any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):
        return "chat"
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        labels = config.get("id2label")
        count = len(labels) if isinstance(labels, dict) else config.get("num_labels")
        if count == 1:
            return "rerank"
    return "embeddings"


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; ``{}`` when missing or unreadable (model folders vary)."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        logger.warning("cannot read %s: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def read_chat_template(folder: Path) -> str | None:
    """The chat template an IR folder ships, wherever optimum or transformers put it."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace")
    for name in ("chat_template.json", "tokenizer_config.json"):
        value = read_json(folder / name).get("chat_template")
        if isinstance(value, str):
            return value
        if isinstance(value, list):  # named templates: [{"name": ..., "template": ...}]
            return "\n".join(str(t.get("template", "")) for t in value if isinstance(t, dict))
    return None


def _first_int(config: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None
