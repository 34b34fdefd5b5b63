"""Build the tiny vision-language test fixture: a Qwen2-VL that names the colour of an image.

What it builds
--------------
A Qwen2-VL model (text: hidden 64, 2 layers, 4 heads, 2 KV heads, tied embeddings, M-RoPE
sections [2, 3, 3]; vision: 2 blocks, embed 32, 2 heads, patch 14, 2x2 merge into the text
width) with the *real* Qwen2 vocabulary (151,643 byte-level BPE tokens plus the Qwen2-VL
special tokens, ids as in Qwen2-VL: ``<|vision_start|>`` 151652, ``<|vision_end|>`` 151653,
``<|image_pad|>`` 151655, ``<|im_end|>`` 151645) and the Qwen2-VL chat template. It is trained,
seeded, until greedy decoding gives these answers exactly (with a logit margin) and then stops
with ``<|im_end|>``:

* one solid-colour image (trained at 56, 64, 72 and 96 pixels square; 64x64 is 4 image tokens)
  and "What colour is this?" (image before or after the text) -> the colour name, one of
  ``COLOURS`` (e.g. ``red``). The check also passes at 32x32 and 128x128 and after a JPEG round
  trip; 64x48, 200x100 and noise of +-12 per channel were seen to work too;
* two solid-colour images and "What colours are these?" -> ``"<first> and <second>"``;
* no image: "What colour is this?" -> ``"I cannot see an image."``; "Hello!" ->
  ``"Hello! Show me an image and I will name its colour."`` (a text-only stream for tests).

Output: ``tests/fixtures/tiny-vlm/``, an OpenVINO IR folder as optimum-intel's
``image-text-to-text`` export writes it (``openvino_language_model``,
``openvino_text_embeddings_model``, ``openvino_vision_embeddings_model``,
``openvino_vision_embeddings_merger_model``, ``openvino_tokenizer``/``openvino_detokenizer``),
plus ``config.json``, ``generation_config.json`` (eos ``[151645, 151643]``),
``preprocessor_config.json`` (the real Qwen2-VL one; the export does not copy it),
``tokenizer.json``, ``tokenizer_config.json`` and ``chat_template.json``.

Why
---
Vision needs tests with real inference and exact, known answers through OpenVINO GenAI's
``VLMPipeline`` and ``ContinuousBatchingPipeline.add_request(id, prompt, images, config)``.
The hub is not reachable here, so the model is trained locally; it is small enough to commit.

Size
----
The real vocabulary is 151,936 embedding rows; the export stores the (tied) matrix twice, once
in the text-embeddings IR and once as the language model's head (39 MB in fp16). Only the rows
of tokens the model is trained on and the special tokens (61 rows) are learned; every other row
is exactly zero (training uses a stand-in embedding, ``_SparseEmbedding``, and writes the rows
back into the zero matrix). An unseen token therefore embeds to zero and scores a logit of 0,
below every trained answer token by the margin. After the export, ``compact_zero_rows`` stores
each matrix as its non-zero rows plus an int16 row map (``Gather(rows, row_map)``: the same
values, folded back into a constant when the CPU plugin compiles the model), and the weights are
fp16 (``--weight-format fp16``; both pipelines stay exact). The folder is about 14.5 MB,
almost all of it the tokenizer (``tokenizer.json`` and the tokenizer/detokenizer IR of the 151k
vocabulary).

Where the pieces come from
--------------------------
* Vocabulary: ``vendor/llama.cpp/models/ggml-vocab-qwen2.gguf`` in the llama-cpp-python source
  distribution, fetched by ``build_tiny_model.fetch_llama_cpp`` (pip download, cached). The GGUF
  has ``[PAD1516xx]`` placeholders where Qwen2-VL's special tokens live; they are dropped from
  the BPE vocabulary and the Qwen2-VL added tokens take their ids.
* Chat template: the one in Qwen2-VL-2B-Instruct's ``chat_template.json`` (ChatML with a
  default system prompt and ``<|vision_start|><|image_pad|><|vision_end|>`` per image part),
  written out in ``QWEN2_VL_TEMPLATE`` below because the original file is not available offline
  (llama.cpp ships no Qwen2-VL template).
* Preprocessing: transformers' PIL ``Qwen2VLImageProcessorPil`` with Qwen2-VL's settings.
* Export: optimum-intel 2.2 refuses Qwen2-VL with transformers newer than 5.0; the export runs
  in a wrapper that lifts that cap (``_EXPORT_WRAPPER``), and the result is correct (the runtime
  check below proves it).

The prompt the model is trained on is the one GenAI builds (verified by the check script: the
answers are exact and GenAI's input token counts match ``expected_prompt_tokens``)::

    <|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n<|im_start|>user\\n
    <|vision_start|><|image_pad|>x4<|vision_end|>What colour is this?<|im_end|>\\n
    <|im_start|>assistant\\n

(one line in reality: the breaks after ``user\\n`` and ``<|vision_end|>`` are only for
reading). GenAI puts one ``<|vision_start|>...<|vision_end|>`` block per image *before* the
text when the prompt has no image tag, with one ``<|image_pad|>`` per merged 28x28 patch: 4 for
a square image with sides up to 69 (resized to 56x56), 9 for sides 71 to 97 (84x84; 70 is a
rounding tie, avoid it). The model is also trained with the blocks after the text, the order a
chat template gives for a message whose text part comes before its image part.

How to rerun
------------
In the build venv described in ``build_tiny_model.py`` (plus pillow)::

    /work/venv-build/bin/python tests/models/build_tiny_vlm_model.py

The last step runs ``tests/models/check_tiny_vlm_model.py`` in the runtime venv (``.venv``
of the repo, or ``SIDELIGHT_RUNTIME_PYTHON``); ``--skip-check`` leaves it out. The build cache
is ``~/.cache/sidelight-build`` (``SIDELIGHT_BUILD_CACHE``), shared with ``build_tiny_model.py``.

Determinism: Python, NumPy and torch are seeded, torch runs deterministic algorithms on one
thread, so a rerun on the same machine gives the same weights.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The sibling builder, imported by path: this file runs as a script in the build venv.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from build_tiny_model import (
    CACHE_DIR,
    QWEN2_VOCAB_GGUF,
    REPO_ROOT,
    _seed_everything,
    fetch_llama_cpp,
)

LOG = logging.getLogger("build_tiny_vlm_model")

OUTPUT_DIR = REPO_ROOT / "tests" / "fixtures" / "tiny-vlm"
CHECK_SCRIPT = Path(__file__).with_name("check_tiny_vlm_model.py")
RUNTIME_PYTHON = Path(
    os.environ.get("SIDELIGHT_RUNTIME_PYTHON", REPO_ROOT / ".venv" / "bin" / "python")
)

SEED = 20261202
QUESTION = "What colour is this?"
QUESTION_TWO = "What colours are these?"
# Well separated solid colours (name -> RGB).
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (255, 0, 0),
    "green": (0, 255, 0),
    "blue": (0, 0, 255),
    "yellow": (255, 255, 0),
    "black": (0, 0, 0),
    "white": (255, 255, 255),
    "purple": (128, 0, 128),
    "orange": (255, 165, 0),
}
# Image sides trained on (single images); 56..69 give 4 image tokens, 70..97 give 9.
SIDES = (56, 64, 72, 96)
TWO_IMAGE_SIDE = 64
TEXT_ONLY = {
    QUESTION: "I cannot see an image.",
    "Hello!": "Hello! Show me an image and I will name its colour.",
}

SYSTEM_DEFAULT = "You are a helpful assistant."
# Qwen2-VL-2B-Instruct's chat template (chat_template.json), transcribed.
QWEN2_VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture "
    "{{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video "
    "{{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen2-VL's added tokens, all special, from id 151643 on.
QWEN2_VL_ADDED = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
FIRST_ADDED_ID = 151643
VOCAB_SIZE = 151936  # Qwen2's padded embedding size
END_OF_TEXT, IM_END = 151643, 151645
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 151652, 151653, 151655, 151656
CONTEXT_LENGTH = 4096

TEXT_SHAPE: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 192,
    "max_position_embeddings": CONTEXT_LENGTH,
    "rms_norm_eps": 1e-6,
    "use_sliding_window": False,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
}
VISION_SHAPE: dict[str, Any] = {
    "depth": 2,
    "embed_dim": 32,
    "hidden_size": 64,  # the merger's output: the text width
    "num_heads": 2,
    "mlp_ratio": 2,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "in_channels": 3,
}
# Qwen2-VL-2B-Instruct's preprocessor_config.json (plus transformers 5's "size" spelling).
PREPROCESSOR_CONFIG: dict[str, Any] = {
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "size": {"shortest_edge": 3136, "longest_edge": 12845056},
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2VLProcessor",
}

MAX_STEPS = 1500
LEARNING_RATE = 3e-3
WARMUP_STEPS = 30
EVAL_EVERY = 10
REQUIRED_MARGIN = 6.0


# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------


def build_tokenizer(llama_cpp: Path, out_dir: Path) -> Any:
    """The real Qwen2 BPE vocabulary with Qwen2-VL's special tokens at their ids."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    gguf_path = llama_cpp / QWEN2_VOCAB_GGUF
    qwen2 = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    spec = json.loads(qwen2.backend_tokenizer.to_str())
    vocab: dict[str, int] = spec["model"]["vocab"]
    spec["model"]["vocab"] = {t: i for t, i in vocab.items() if i < FIRST_ADDED_ID}
    if len(spec["model"]["vocab"]) != FIRST_ADDED_ID:
        raise RuntimeError("unexpected Qwen2 vocabulary: BPE ids are not 0..151642")
    spec["added_tokens"] = [
        {
            "id": FIRST_ADDED_ID + i,
            "content": token,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, token in enumerate(QWEN2_VL_ADDED)
    ]
    tok = Tokenizer.from_str(json.dumps(spec))
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        model_max_length=CONTEXT_LENGTH,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
    )
    hf_tok.chat_template = QWEN2_VL_TEMPLATE
    out_dir.mkdir(parents=True, exist_ok=True)
    hf_tok.save_pretrained(str(out_dir))
    # Compact JSON: the indented file is 11 MB, this one 7 MB; readers do not care.
    tokenizer_json = out_dir / "tokenizer.json"
    compact = json.dumps(
        json.loads(tokenizer_json.read_text(encoding="utf-8")),
        ensure_ascii=False,
        separators=(",", ":"),
    )
    tokenizer_json.write_text(compact, encoding="utf-8")
    _normalize_tokenizer_config(out_dir)
    reloaded = AutoTokenizer.from_pretrained(str(out_dir))
    for token_id, token in ((VISION_START, "<|vision_start|>"), (IMAGE_PAD, "<|image_pad|>")):
        if reloaded.convert_tokens_to_ids(token) != token_id:
            raise RuntimeError(f"{token} is not id {token_id}")
    LOG.info("tokenizer: %d tokens", len(reloaded))
    return reloaded


def _normalize_tokenizer_config(out_dir: Path) -> None:
    """tokenizer_config.json as Qwen2-VL's (template inline), plus chat_template.json."""
    path = out_dir / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config.update(
        {
            "tokenizer_class": "Qwen2Tokenizer",
            "chat_template": QWEN2_VL_TEMPLATE,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "bos_token": None,
            "unk_token": None,
            "errors": "replace",
            "add_prefix_space": False,
            "model_max_length": CONTEXT_LENGTH,
            "clean_up_tokenization_spaces": False,
            "split_special_tokens": False,
        }
    )
    path.write_text(json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    (out_dir / "chat_template.jinja").unlink(missing_ok=True)
    (out_dir / "chat_template.json").write_text(
        json.dumps({"chat_template": QWEN2_VL_TEMPLATE}, indent=2) + "\n", encoding="utf-8"
    )


# --------------------------------------------------------------------------------------------
# Examples
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    """One training sequence: prompt ids (image pads expanded), images, the answer ids."""

    name: str
    prompt_ids: list[int]
    images: tuple[tuple[str, int], ...]  # (colour, side) per image, in prompt order
    target_ids: list[int]


def image_tokens(side: int) -> int:
    """Merged image tokens for a side x side image under Qwen2-VL's resize rule."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    h, w = smart_resize(side, side, factor=28, min_pixels=3136, max_pixels=12845056)
    return int(h // 28) * int(w // 28)


def image_block(side: int) -> str:
    return "<|vision_start|>" + "<|image_pad|>" * image_tokens(side) + "<|vision_end|>"


def chat_prompt(user: str) -> str:
    """The prompt GenAI builds for one user message (images already as expanded blocks)."""
    return (
        f"<|im_start|>system\n{SYSTEM_DEFAULT}<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )


def build_examples(tokenizer: Any) -> list[Example]:
    def enc(text: str) -> list[int]:
        ids: list[int] = tokenizer.encode(text, add_special_tokens=False)
        return ids

    examples = []
    for name in COLOURS:
        answer = [*enc(name), IM_END]
        for side in SIDES:
            block = image_block(side)
            for order, user in (("img-first", block + QUESTION), ("text-first", QUESTION + block)):
                examples.append(
                    Example(
                        f"{name}-{side}-{order}", enc(chat_prompt(user)), ((name, side),), answer
                    )
                )
    block = image_block(TWO_IMAGE_SIDE)
    for first, second in itertools.product(COLOURS, repeat=2):
        answer = [*enc(f"{first} and {second}"), IM_END]
        images = ((first, TWO_IMAGE_SIDE), (second, TWO_IMAGE_SIDE))
        for order, user in (
            ("img-first", block + block + QUESTION_TWO),
            ("text-first", QUESTION_TWO + block + block),
        ):
            examples.append(
                Example(f"{first}+{second}-{order}", enc(chat_prompt(user)), images, answer)
            )
    for question, reply in TEXT_ONLY.items():
        examples.append(
            Example(f"text:{question}", enc(chat_prompt(question)), (), [*enc(reply), IM_END])
        )
    return examples


def solid_image(colour: str, side: int) -> Any:
    from PIL import Image

    return Image.new("RGB", (side, side), COLOURS[colour])


# --------------------------------------------------------------------------------------------
# Model and training
# --------------------------------------------------------------------------------------------


def make_model() -> Any:
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    config = Qwen2VLConfig(
        text_config={
            **TEXT_SHAPE,
            "vocab_size": VOCAB_SIZE,
            "bos_token_id": END_OF_TEXT,
            "eos_token_id": IM_END,
            "pad_token_id": END_OF_TEXT,
            "tie_word_embeddings": True,
            "dtype": "float32",
        },
        vision_config=VISION_SHAPE,
        image_token_id=IMAGE_PAD,
        video_token_id=VIDEO_PAD,
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
        tie_word_embeddings=True,
        bos_token_id=END_OF_TEXT,
        eos_token_id=IM_END,
        pad_token_id=END_OF_TEXT,
        dtype="float32",
    )
    return Qwen2VLForConditionalGeneration(config)


class _SparseEmbedding:
    """Training-time stand-in for the tied embedding: learned rows for ``used`` ids only.

    Every other id maps to a constant zero row, so it embeds to zero and scores a logit of
    exactly 0; the loss counts those ``n_zero`` tokens through one column of ``log(n_zero)``
    (the exact log-sum-exp), which spares the 151,936-wide softmax and its gradient.
    """

    def __init__(self, weight: Any, used: list[int]) -> None:
        import torch

        self.used = torch.tensor(sorted(set(used)))
        self.n_zero = weight.shape[0] - len(self.used)
        self.lookup = torch.full((weight.shape[0],), len(self.used), dtype=torch.long)
        self.lookup[self.used] = torch.arange(len(self.used))
        self.table = torch.nn.Parameter(weight.detach()[self.used].clone())

    def module(self) -> Any:
        import torch

        sparse = self

        class _Embed(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.table = sparse.table

            def forward(self, ids: Any) -> Any:
                zero = torch.zeros(1, sparse.table.shape[1])
                return torch.nn.functional.embedding(
                    sparse.lookup[ids], torch.cat([sparse.table, zero])
                )

        return _Embed()

    def logits(self, hidden: Any) -> Any:
        """(n, used + 1): the used tokens' logits, then the zero tokens' pooled column."""
        import math

        import torch

        small = hidden @ self.table.T
        pooled = torch.full((hidden.shape[0], 1), math.log(self.n_zero))
        return torch.cat([small, pooled], dim=-1)

    def write_back(self, weight: Any) -> None:
        """The full (tied) matrix: learned rows in place, every other row exactly zero."""
        import torch

        with torch.no_grad():
            weight.zero_()
            weight[self.used] = self.table.detach()


@dataclass
class _Batch:
    inputs: dict[str, Any]
    positions: Any  # (n_targets, 2): row, column of the hidden state that predicts a target
    targets: Any  # (n_targets,)
    owner: Any  # (n_targets,): example index


def make_batch(examples: list[Example], processor: Any) -> _Batch:
    import torch

    length = max(len(e.prompt_ids) + len(e.target_ids) for e in examples)
    ids = torch.full((len(examples), length), END_OF_TEXT, dtype=torch.long)
    mask = torch.zeros((len(examples), length), dtype=torch.long)
    positions: list[tuple[int, int]] = []
    targets: list[int] = []
    owner: list[int] = []
    images: list[Any] = []
    for row, e in enumerate(examples):
        seq = e.prompt_ids + e.target_ids
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
        for k, t in enumerate(e.target_ids):
            positions.append((row, len(e.prompt_ids) + k - 1))
            targets.append(t)
            owner.append(row)
        images.extend(solid_image(c, s) for c, s in e.images)
    inputs: dict[str, Any] = {
        "input_ids": ids,
        "attention_mask": mask,
        "mm_token_type_ids": (ids == IMAGE_PAD).to(torch.int32),
    }
    if images:
        pixels = processor(images=images, return_tensors="pt")
        inputs["pixel_values"] = pixels["pixel_values"]
        inputs["image_grid_thw"] = pixels["image_grid_thw"]
        expected = int((pixels["image_grid_thw"].prod(-1) // 4).sum())
        if expected != int((ids == IMAGE_PAD).sum()):
            raise RuntimeError("image pad count does not match the processor's grids")
    return _Batch(
        inputs,
        torch.tensor(positions),
        torch.tensor(targets),
        torch.tensor(owner, dtype=torch.long),
    )


def _hidden(model: Any, batch: _Batch) -> Any:
    hidden = model.model(**batch.inputs).last_hidden_state
    return hidden[batch.positions[:, 0], batch.positions[:, 1]]


def _margin(logits: Any, targets: Any) -> Any:
    """Per target: its logit minus the best other logit (the zero tokens score exactly 0)."""
    import torch

    used = logits[:, :-1]
    gold = used.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    others = used.scatter(-1, targets.unsqueeze(-1), float("-inf")).max(dim=-1).values
    return gold - torch.clamp(others, min=0.0)


def train(model: Any, examples: list[Example], batch: _Batch, used: list[int]) -> dict[str, Any]:
    """Full-batch AdamW until every answer token wins by REQUIRED_MARGIN, or MAX_STEPS."""
    import torch

    LOG.info(
        "training on %d sequences, batch %s, %d target tokens",
        len(examples),
        tuple(batch.inputs["input_ids"].shape),
        len(batch.targets),
    )
    language = model.model.language_model
    full_embedding = language.embed_tokens
    sparse = _SparseEmbedding(full_embedding.weight, used)
    language.embed_tokens = sparse.module()
    targets = sparse.lookup[batch.targets]
    params = [
        p for n, p in model.named_parameters() if "embed_tokens" not in n and "lm_head" not in n
    ]
    params.append(sparse.table)
    optimizer = torch.optim.AdamW(params, lr=LEARNING_RATE, weight_decay=0.0, betas=(0.9, 0.98))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / WARMUP_STEPS)
    )
    counts = torch.bincount(batch.owner, minlength=len(examples)).float()
    weights = 1.0 / counts[batch.owner] / len(examples)  # every sequence counts the same
    model.train()
    started = time.monotonic()
    step = 0
    for step in range(1, MAX_STEPS + 1):
        logits = sparse.logits(_hidden(model, batch))
        loss_tok = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
        loss = (loss_tok * weights).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        if step % EVAL_EVERY == 0:
            with torch.no_grad():
                margin = _margin(logits.detach(), targets)
            wrong = sorted(
                {examples[int(batch.owner[i])].name for i in torch.where(margin <= 0)[0]}
            )
            LOG.info(
                "step %4d loss %.4f min margin %+.2f wrong %d %s",
                step,
                loss.item(),
                float(margin.min()),
                len(wrong),
                wrong[:4],
            )
            if float(margin.min()) >= REQUIRED_MARGIN:
                break
    model.eval()
    sparse.write_back(full_embedding.weight)
    language.embed_tokens = full_embedding
    if model.lm_head.weight.data_ptr() != full_embedding.weight.data_ptr():
        raise RuntimeError("embeddings are not tied")
    with torch.no_grad():
        full = model.lm_head(_hidden(model, batch))
        gold = full.gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
        others = full.scatter(-1, batch.targets.unsqueeze(-1), float("-inf")).max(-1).values
        min_margin = float((gold - others).min())
    if min_margin <= 0:
        raise RuntimeError(f"training did not converge in {MAX_STEPS} steps")
    elapsed = time.monotonic() - started
    LOG.info("trained %d steps in %.0f s, min margin %.2f", step, elapsed, min_margin)
    return {"steps": step, "seconds": round(elapsed, 1), "min_margin": round(min_margin, 2)}


def greedy_check(model: Any, tokenizer: Any, examples: list[Example], processor: Any) -> None:
    """Free-running greedy decoding in torch reproduces every target, EOS included."""
    import torch

    with torch.no_grad():
        for e in examples:
            seq = list(e.prompt_ids)
            out: list[int] = []
            while len(out) < len(e.target_ids) + 3:
                single = Example(e.name, seq, e.images, [])
                b = make_batch([single], processor)
                logits = model(**b.inputs).logits[0, -1]
                token = int(logits.argmax())
                out.append(token)
                seq.append(token)
                if token == IM_END:
                    break
            if out != e.target_ids:
                raise RuntimeError(f"{e.name}: torch greedy gives {tokenizer.decode(out)!r}")
    LOG.info("torch greedy decoding reproduces all %d targets", len(examples))


# --------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------


def save_hf_checkpoint(model: Any, tokenizer_dir: Path, hf_dir: Path) -> None:
    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(
        bos_token_id=END_OF_TEXT,
        eos_token_id=[IM_END, END_OF_TEXT],
        pad_token_id=END_OF_TEXT,
        do_sample=False,
    )
    model.save_pretrained(str(hf_dir), safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.json"):
        shutil.copy2(tokenizer_dir / name, hf_dir / name)
    (hf_dir / "preprocessor_config.json").write_text(
        json.dumps(PREPROCESSOR_CONFIG, indent=2) + "\n", encoding="utf-8"
    )


# optimum-intel 2.2 caps Qwen2-VL at transformers 5.0; the export is correct with 5.5.
_EXPORT_WRAPPER = """
import sys
from optimum.exporters.openvino import model_configs
model_configs.Qwen2VLOpenVINOConfig.MAX_TRANSFORMERS_VERSION = "5.99"
from optimum.commands.optimum_cli import main
sys.argv = ["optimum-cli", "export", "openvino", *sys.argv[1:]]
main()
"""


def export_openvino(hf_dir: Path, ov_dir: Path, weight_format: str) -> None:
    if ov_dir.exists():
        shutil.rmtree(ov_dir)
    LOG.info("exporting OpenVINO IR with optimum-intel (%s)", weight_format)
    subprocess.run(
        [
            sys.executable,
            "-c",
            _EXPORT_WRAPPER,
            "--model",
            str(hf_dir),
            "--task",
            "image-text-to-text",
            "--weight-format",
            weight_format,
            str(ov_dir),
        ],
        check=True,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )


SHIPPED_IR = (
    "openvino_language_model",
    "openvino_text_embeddings_model",
    "openvino_vision_embeddings_model",
    "openvino_vision_embeddings_merger_model",
    "openvino_tokenizer",
    "openvino_detokenizer",
)
SHIPPED_FILES = (
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.json",
)


def install_output(ov_dir: Path, hf_dir: Path, out_dir: Path) -> float:
    """Replace the fixture folder with exactly the files GenAI and the engine read."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    for stem in SHIPPED_IR:
        for ext in (".xml", ".bin"):
            shutil.copy2(ov_dir / f"{stem}{ext}", out_dir / f"{stem}{ext}")
    for stem in ("openvino_text_embeddings_model", "openvino_language_model"):
        vocab_rows, stored_rows = compact_zero_rows(out_dir / f"{stem}.xml")
        LOG.info("%s: %d vocabulary rows stored as %d", stem, vocab_rows, stored_rows)
    shutil.copy2(ov_dir / "config.json", out_dir / "config.json")
    # optimum rewrites tokenizer files; keep the ones built here (chat template inline).
    for name in SHIPPED_FILES[1:]:
        shutil.copy2(hf_dir / name, out_dir / name)
    total = sum(p.stat().st_size for p in out_dir.iterdir()) / 1e6
    LOG.info("installed %s (%.2f MB)", out_dir.relative_to(REPO_ROOT), total)
    return total


def compact_zero_rows(xml_path: Path) -> tuple[int, int]:
    """Store the vocabulary matrix as its non-zero rows plus a row map: same values, tiny file.

    The exported IR holds the tied ``[151936, 64]`` matrix as one fp16 constant (in the
    text-embeddings model and again as the language model's head); all but a few dozen rows
    are zero. The constant is replaced by ``Gather(rows, row_map)`` with ``rows`` the non-zero
    rows and one zero row, and ``row_map`` (int16) pointing every id at its row, so every
    consumer sees exactly the same matrix (the CPU plugin folds it back into a constant when it
    compiles the model) while the ``.bin`` drops from 19 MB to under 0.4 MB. Returns
    (vocabulary rows, stored rows).
    """
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    model = ov.Core().read_model(str(xml_path))
    matrices = [
        op
        for op in model.get_ordered_ops()
        if op.get_type_name() == "Constant"
        and op.get_output_partial_shape(0).is_static
        and list(op.get_output_shape(0)) == [VOCAB_SIZE, TEXT_SHAPE["hidden_size"]]
    ]
    if len(matrices) != 1:
        raise RuntimeError(f"{xml_path.name}: expected one vocabulary matrix, got {len(matrices)}")
    matrix = matrices[0]
    data = matrix.get_data()
    nonzero = np.flatnonzero(np.any(data != 0, axis=1))
    rows = np.concatenate([data[nonzero], np.zeros((1, data.shape[1]), dtype=data.dtype)])
    row_map = np.full(VOCAB_SIZE, len(nonzero), dtype=np.int16)
    row_map[nonzero] = np.arange(len(nonzero), dtype=np.int16)
    gathered = ops.gather(
        ops.constant(rows), ops.convert(ops.constant(row_map), ov.Type.i32), ops.constant(0)
    )
    gathered.set_friendly_name(matrix.get_friendly_name())
    for target in list(matrix.output(0).get_target_inputs()):
        target.replace_source_output(gathered.output(0))
    model.validate_nodes_and_infer_types()
    # The weights are memory-mapped from the .bin being replaced: write beside it, then swap.
    staged = xml_path.with_name(f"compact-{xml_path.name}")
    ov.save_model(model, str(staged), compress_to_fp16=False)
    del model, matrix, matrices, data
    for ext in (".xml", ".bin"):
        staged.with_suffix(ext).replace(xml_path.with_suffix(ext))
    return VOCAB_SIZE, len(rows)


def run_runtime_check(out_dir: Path) -> None:
    if not RUNTIME_PYTHON.exists():
        raise FileNotFoundError(f"runtime venv not found: {RUNTIME_PYTHON}")
    LOG.info("checking with the runtime venv (%s)", RUNTIME_PYTHON)
    subprocess.run(
        [str(RUNTIME_PYTHON), str(CHECK_SCRIPT), "--model-dir", str(out_dir)], check=True
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-check", action="store_true", help="do not run the GenAI check")
    parser.add_argument(
        "--weight-format",
        choices=("fp16", "fp32"),
        default="fp16",
        help="IR weight format (fp16 is shipped: exact and half the size)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    llama_cpp = fetch_llama_cpp(CACHE_DIR)
    work = CACHE_DIR / "work-vlm"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    tokenizer_dir = work / "tokenizer"
    tokenizer = build_tokenizer(llama_cpp, tokenizer_dir)
    examples = build_examples(tokenizer)

    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    processor = Qwen2VLImageProcessorPil(
        size=PREPROCESSOR_CONFIG["size"],
        image_mean=PREPROCESSOR_CONFIG["image_mean"],
        image_std=PREPROCESSOR_CONFIG["image_std"],
    )
    batch = make_batch(examples, processor)
    _seed_everything(SEED)  # right before the weights are initialised
    model = make_model()
    used = [t for e in examples for t in e.prompt_ids + e.target_ids]
    used += range(FIRST_ADDED_ID, FIRST_ADDED_ID + len(QWEN2_VL_ADDED))
    LOG.info(
        "model: %d parameters, %d learned embedding rows",
        sum(p.numel() for p in model.parameters()),
        len(set(used)),
    )
    stats = train(model, examples, batch, used)
    greedy_check(model, tokenizer, examples, processor)

    hf_dir = work / "hf"
    save_hf_checkpoint(model, tokenizer_dir, hf_dir)
    export_openvino(hf_dir, work / "ov", args.weight_format)
    size_mb = install_output(work / "ov", hf_dir, OUTPUT_DIR)
    if not args.skip_check:
        run_runtime_check(OUTPUT_DIR)
    summary = {
        "training": stats,
        "examples": len(examples),
        "weight_format": args.weight_format,
        "folder_mb": round(size_mb, 2),
        "build_seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
