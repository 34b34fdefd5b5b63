"""Build the tiny Whisper model and the test clips used by the ``/v1/audio`` tests.

What it builds
--------------
- ``tests/fixtures/audio/*.wav``: a few short English sentences spoken by ``espeak-ng`` and
  resampled by ``sox`` to 16 kHz mono 16-bit WAV, a second of silence, and the first clip
  converted to MP3 and Ogg Vorbis by ``sox`` (what people upload is rarely WAV).
- ``tests/fixtures/tiny-whisper/``: a Whisper model (d_model 64, 2 encoder + 2 decoder layers,
  the real 51,865-token multilingual vocabulary, tied embeddings, fp16 weights: 10 MB)
  trained until greedy decoding transcribes every clip exactly, exported by optimum-intel
  (``automatic-speech-recognition-with-past``) to OpenVINO IR with its tokenizer converted by
  openvino-tokenizers: the folder layout ``WhisperPipeline`` and ``ASRPipeline`` load.

The model is trained on three decoder prompts per clip, so each serving path has something
exact to check: transcribe without timestamps, transcribe with timestamps (one segment from
``<|0.00|>`` to the clip's length) and translate (English to English: the same text).
The silent clip is trained to end at once, though GenAI's ``begin_suppress_tokens`` make
Whisper say something (the server never sends silence to the model).

Why
---
The hub is not reachable, and a random Whisper ignores its audio. Facts measured here (see
``../shared/DESIGN.md``, "Tiny multimodal fixtures"): the vocabulary is rebuilt from
``multilingual.tiktoken`` in the ``openai-whisper`` sdist (ids match whisper-tiny); GenAI reads
its language and task maps, ``is_multilingual``, the no-timestamps token and the suppress lists
from ``generation_config.json`` (written here); a tiny Whisper learns to listen only once its
two input convolutions are re-initialised (std 0.2).

How to rerun
------------
Debian packages ``espeak-ng`` and ``sox`` (``apt-get install espeak-ng sox libsox-fmt-all``),
the build venv described in ``tests/models/build_tiny_model.py`` and the ``openai-whisper``
sdist unpacked somewhere (only its ``multilingual.tiktoken`` and ``tokenizer.py`` are read)::

    pip download --no-deps --no-binary :all: openai-whisper -d /tmp/whisper-sdist
    tar xzf /tmp/whisper-sdist/openai_whisper-*.tar.gz -C /tmp/whisper-sdist
    nice -n 19 /work/venv-build/bin/python tests/models/build_tiny_whisper_model.py \\
        /tmp/whisper-sdist/openai_whisper-*/whisper

then check it in the runtime venv::

    .venv/bin/python tests/models/check_tiny_whisper_model.py

Seeded and deterministic on one machine (torch CPU); espeak-ng output can differ between
espeak-ng versions, so rebuild the clips and the model together.
"""

from __future__ import annotations

import ast
import base64
import json
import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
OUTPUT_DIR = REPO_ROOT / "tests" / "fixtures" / "tiny-whisper"
AUDIO_DIR = REPO_ROOT / "tests" / "fixtures" / "audio"
TRANSCRIPTS = AUDIO_DIR / "transcripts.json"
SEED = 20261202
SAMPLE_RATE = 16000
CLIPS = {
    "hello": "Hello world.",
    "cat": "The cat sat on the mat.",
    "light": "Turn left at the next light.",
    "report": "Please send me the report today.",
    "river": "We walked along the river.",
}
SILENCE = "silence"
CONVERTED = (("hello", "mp3"), ("cat", "ogg"))  # clip, the format sox converts it to
SHAPE = {
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "num_mel_bins": 80,
    "max_source_positions": 1500,
    "max_target_positions": 448,
}
N_LANGUAGES = 99  # whisper-tiny's multilingual vocabulary (51,865 ids)
MAX_STEPS = 400
LEARNING_RATE = 3e-3

logger = logging.getLogger("build_tiny_whisper_model")


# --- clips -------------------------------------------------------------------------------


def make_clips() -> dict[str, float]:
    """Speak each sentence, resample to 16 kHz mono; the seconds each clip lasts."""
    AUDIO_DIR.mkdir(parents=True, exist_ok=True)
    lengths: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in CLIPS.items():
            raw = Path(tmp) / f"{name}.wav"
            out = AUDIO_DIR / f"{name}.wav"
            subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(raw), text], check=True)
            _sox(raw, out)
            lengths[name] = _seconds(out)
    silence = AUDIO_DIR / f"{SILENCE}.wav"
    subprocess.run(
        [
            "sox",
            "-n",
            "-r",
            str(SAMPLE_RATE),
            "-c",
            "1",
            "-b",
            "16",
            str(silence),
            "trim",
            "0",
            "1",
        ],
        check=True,
    )
    for name, fmt in CONVERTED:
        subprocess.run(
            ["sox", str(AUDIO_DIR / f"{name}.wav"), str(AUDIO_DIR / f"{name}.{fmt}")], check=True
        )
    return lengths


def _sox(source: Path, target: Path) -> None:
    args = ["sox", str(source), "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(target)]
    subprocess.run(args, check=True)


def _seconds(path: Path) -> float:
    out = subprocess.run(["soxi", "-D", str(path)], check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def _samples(path: Path) -> Any:
    import numpy as np
    import soundfile

    data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    assert rate == SAMPLE_RATE, (path, rate)
    return np.asarray(data.mean(axis=1), dtype=np.float32)


# --- vocabulary --------------------------------------------------------------------------


def _languages(whisper_src: Path) -> list[str]:
    """Whisper's language codes in vocabulary order (``LANGUAGES`` in its tokenizer.py)."""
    tree = ast.parse((whisper_src / "tokenizer.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "LANGUAGES":
            table = ast.literal_eval(node.value)
            return list(table)[:N_LANGUAGES]
    raise SystemExit("LANGUAGES not found in tokenizer.py")


def _specials(languages: list[str]) -> list[str]:
    return [
        "<|endoftext|>",
        "<|startoftranscript|>",
        *[f"<|{code}|>" for code in languages],
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        "<|nospeech|>",
        "<|notimestamps|>",
        *[f"<|{i * 0.02:.2f}|>" for i in range(1501)],
    ]


def build_tokenizer(whisper_src: Path, hf_dir: Path) -> dict[str, int]:
    """The byte-level BPE rebuilt from the tiktoken ranks, saved; its special-token ids."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import WhisperTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    ranks: dict[bytes, int] = {}
    for line in (whisper_src / "assets" / "multilingual.tiktoken").read_text().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    byte_encoder = bytes_to_unicode()

    def text(piece: bytes) -> str:
        return "".join(byte_encoder[b] for b in piece)

    vocab = {text(piece): rank for piece, rank in ranks.items()}
    merges: list[tuple[str, str]] = []
    ranked: list[tuple[int, tuple[str, str]]] = []
    for piece, rank in ranks.items():
        if len(piece) == 1:
            continue
        # The merge that made ``piece``: the split whose halves both rank below it, best first.
        best: tuple[int, tuple[str, str]] | None = None
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in ranks and right in ranks and ranks[left] < rank and ranks[right] < rank:
                key = max(ranks[left], ranks[right])
                if best is None or key < best[0]:
                    best = (key, (text(left), text(right)))
        if best is not None:
            ranked.append((rank, best[1]))
    merges = [pair for _, pair in sorted(ranked)]
    bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=False)
    raw = Tokenizer(bpe)
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    specials = _specials(_languages(whisper_src))
    timestamp = specials.index("<|0.00|>")
    raw.add_special_tokens(
        [AddedToken(token, special=index < timestamp) for index, token in enumerate(specials)]
    )
    tokenizer = WhisperTokenizerFast(
        tokenizer_object=raw,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        model_max_length=SHAPE["max_target_positions"],
    )
    tokenizer.save_pretrained(str(hf_dir))
    ids = {token: raw.token_to_id(token) for token in specials}
    assert ids["<|endoftext|>"] == 50257 and ids["<|notimestamps|>"] == 50363, ids
    assert raw.get_vocab_size() == 51865, raw.get_vocab_size()
    return ids


def generation_config(ids: dict[str, int], languages: list[str]) -> dict[str, Any]:
    """What GenAI's Whisper pipeline reads (whisper-tiny's keys)."""
    eot = ids["<|endoftext|>"]
    return {
        "bos_token_id": eot,
        "eos_token_id": eot,
        "pad_token_id": eot,
        "decoder_start_token_id": ids["<|startoftranscript|>"],
        "begin_suppress_tokens": [220, eot],
        "suppress_tokens": [],
        "is_multilingual": True,
        "lang_to_id": {f"<|{code}|>": ids[f"<|{code}|>"] for code in languages},
        "task_to_id": {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        "no_timestamps_token_id": ids["<|notimestamps|>"],
        "prev_sot_token_id": ids["<|startofprev|>"],
        "max_initial_timestamp_index": 50,
        "max_length": SHAPE["max_target_positions"],
        "return_timestamps": False,
    }


# --- model -------------------------------------------------------------------------------


def _targets(
    tokenizer: Any, ids: dict[str, int], lengths: dict[str, float]
) -> list[tuple[str, list[int]]]:
    """(clip, decoder token ids) for every prompt the model is trained on."""
    sot, en, eot = ids["<|startoftranscript|>"], ids["<|en|>"], ids["<|endoftext|>"]
    transcribe, translate = ids["<|transcribe|>"], ids["<|translate|>"]
    plain = ids["<|notimestamps|>"]
    rows: list[tuple[str, list[int]]] = []
    for name, sentence in CLIPS.items():
        words = tokenizer.encode(" " + sentence, add_special_tokens=False)
        end = ids[f"<|{_timestamp(lengths[name]):.2f}|>"]
        rows.append((name, [sot, en, transcribe, plain, *words, eot]))
        rows.append((name, [sot, en, translate, plain, *words, eot]))
        rows.append((name, [sot, en, transcribe, ids["<|0.00|>"], *words, end, eot]))
    rows.append((SILENCE, [sot, en, transcribe, plain, eot]))
    rows.append((SILENCE, [sot, en, translate, plain, eot]))
    return rows


def _timestamp(seconds: float) -> float:
    """The 0.02 s step at or below ``seconds`` (Whisper's timestamp tokens)."""
    return int(seconds / 0.02) * 0.02


def train(hf_dir: Path, ids: dict[str, int], lengths: dict[str, float]) -> None:
    """Train a seeded tiny Whisper until greedy decoding reproduces every target."""
    import numpy as np
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperTokenizerFast,
    )

    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    tokenizer = WhisperTokenizerFast.from_pretrained(str(hf_dir))
    extractor = WhisperFeatureExtractor(feature_size=SHAPE["num_mel_bins"])
    extractor.save_pretrained(str(hf_dir))
    eot = ids["<|endoftext|>"]
    config = WhisperConfig(
        vocab_size=51865,
        **SHAPE,
        pad_token_id=eot,
        bos_token_id=eot,
        eos_token_id=eot,
        decoder_start_token_id=ids["<|startoftranscript|>"],
        begin_suppress_tokens=[220, eot],
        suppress_tokens=[],
        tie_word_embeddings=True,
        dropout=0.0,
    )
    model = WhisperForConditionalGeneration(config)
    with torch.no_grad():  # a tiny Whisper ignores its audio until these are louder
        for conv in (model.model.encoder.conv1, model.model.encoder.conv2):
            conv.weight.normal_(0.0, 0.2)

    names = [*CLIPS, SILENCE]
    clean = {name: _samples(AUDIO_DIR / f"{name}.wav") for name in names}

    def features(audio: Any) -> Any:
        out = extractor(audio, sampling_rate=SAMPLE_RATE, return_tensors="pt")
        return out.input_features[0]

    # A few seeded variants of each clip (gain, faint noise): the converted clips and GenAI's
    # own mel code differ slightly from this one, and the transcripts must survive that.
    variants: dict[str, list[Any]] = {name: [features(clean[name])] for name in names}
    for name in names:
        for _ in range(3):
            gain = float(rng.uniform(0.6, 1.2))
            noise = rng.normal(0.0, 0.002, clean[name].shape).astype(np.float32)
            audio = np.clip(clean[name] * gain + noise, -1.0, 1.0).astype(np.float32)
            variants[name].append(features(audio))

    rows = _targets(tokenizer, ids, lengths)
    width = max(len(tokens) for _, tokens in rows)
    inputs = torch.full((len(rows), width - 1), eot, dtype=torch.long)
    labels = torch.full((len(rows), width - 1), -100, dtype=torch.long)
    for row, (_, tokens) in enumerate(rows):
        inputs[row, : len(tokens) - 1] = torch.tensor(tokens[:-1])
        labels[row, : len(tokens) - 1] = torch.tensor(tokens[1:])
        # The task and timestamp tokens are the caller's choice, not the model's: no loss
        # there (the language after <|startoftranscript|> is learnt: GenAI detects it).
        labels[row, 1:3] = -100
    # Each clip is encoded once a step and its encoding shared by its prompts.
    row_clip = torch.tensor([names.index(name) for name, _ in rows])
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    model.train()
    for step in range(1, MAX_STEPS + 1):
        pick = [int(rng.integers(len(variants[name]))) for name in names]
        mels = torch.stack([variants[name][k] for name, k in zip(names, pick, strict=True)])
        encoded = model.model.encoder(mels).last_hidden_state[row_clip]
        loss = model(encoder_outputs=(encoded,), decoder_input_ids=inputs, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            exact = _exact(model, rows, variants)
            logger.info("step %d loss %.4f exact %d/%d", step, loss.item(), exact, len(rows))
            model.train()
            if exact == len(rows) and loss.item() < 0.02:
                break
    else:
        raise SystemExit("the tiny Whisper did not learn every clip")
    model.eval()
    model.generation_config = GenerationConfig(**generation_config(ids, _languages_of(ids)))
    model.save_pretrained(str(hf_dir), safe_serialization=True)


def _languages_of(ids: dict[str, int]) -> list[str]:
    first, last = ids["<|startoftranscript|>"] + 1, ids["<|translate|>"]
    names = {index: token for token, index in ids.items()}
    return [names[index][2:-2] for index in range(first, last)]


def _exact(model: Any, rows: list[tuple[str, list[int]]], variants: dict[str, list[Any]]) -> int:
    """How many targets greedy decoding reproduces from the prompt, on every variant."""
    import torch

    model.eval()
    good = 0
    with torch.no_grad():
        for name, tokens in rows:
            prompt = 4  # sot, language, task, timestamps-or-not
            mels = torch.stack(variants[name])
            encoded = model.model.encoder(mels).last_hidden_state
            seq = torch.tensor([tokens[:prompt]] * len(variants[name]))
            for _ in range(len(tokens) - prompt):
                logits = model(encoder_outputs=(encoded,), decoder_input_ids=seq).logits
                seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            # language detection: <|startoftranscript|> alone must predict <|en|>
            first = model(encoder_outputs=(encoded,), decoder_input_ids=seq[:, :1]).logits
            if all(row == tokens for row in seq.tolist()) and bool(
                (first[:, -1].argmax(-1) == tokens[1]).all()
            ):
                good += 1
    return good


# --- export ------------------------------------------------------------------------------


def export(hf_dir: Path, ids: dict[str, int]) -> None:
    """optimum-intel's export (with its tokenizer conversion), then the generation config."""
    from optimum.exporters.openvino import main_export

    if OUTPUT_DIR.exists():
        shutil.rmtree(OUTPUT_DIR)
    main_export(
        model_name_or_path=str(hf_dir),
        output=str(OUTPUT_DIR),
        task="automatic-speech-recognition-with-past",
        ov_config=None,
    )
    (OUTPUT_DIR / "generation_config.json").write_text(
        json.dumps(generation_config(ids, _languages_of(ids)), indent=2) + "\n"
    )
    for name in ("preprocessor_config.json",):  # the export does not always copy it
        if not (OUTPUT_DIR / name).exists():
            shutil.copy(hf_dir / name, OUTPUT_DIR / name)
    finish_export()


def finish_export() -> None:
    """The tokenizer pair (the export skips it for this tokenizer), fp16 weights, tidy.

    fp16 halves the folder (the 51,865 x 64 embedding is most of it); the check script
    confirms every transcript stays exact through GenAI.
    """
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer
    from transformers import AutoTokenizer

    if not (OUTPUT_DIR / "openvino_tokenizer.xml").exists():
        tokenizer = AutoTokenizer.from_pretrained(str(OUTPUT_DIR))
        encoder, decoder = convert_tokenizer(
            tokenizer, with_detokenizer=True, skip_special_tokens=True
        )
        ov.save_model(encoder, str(OUTPUT_DIR / "openvino_tokenizer.xml"))
        ov.save_model(decoder, str(OUTPUT_DIR / "openvino_detokenizer.xml"))
    core = ov.Core()
    for stem in ("openvino_encoder_model", "openvino_decoder_model"):
        xml = OUTPUT_DIR / f"{stem}.xml"
        model = core.read_model(str(xml))
        with tempfile.TemporaryDirectory() as tmp:
            ov.save_model(model, str(Path(tmp) / xml.name), compress_to_fp16=True)
            del model
            for suffix in (".xml", ".bin"):
                shutil.copy(Path(tmp) / f"{stem}{suffix}", OUTPUT_DIR / f"{stem}{suffix}")
    for extra in (
        "merges.txt",
        "vocab.json",
        "normalizer.json",
        "added_tokens.json",
        "tokenizer.json",  # 4 MB; GenAI reads the IR tokenizer
    ):
        (OUTPUT_DIR / extra).unlink(missing_ok=True)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    if sys.argv[1:] == ["--finish"]:  # only the steps after the export, on the folder
        finish_export()
        return 0
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    whisper_src = Path(sys.argv[1])
    lengths = make_clips()
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = Path(tmp)
        ids = build_tokenizer(whisper_src, hf_dir)
        train(hf_dir, ids, lengths)
        export(hf_dir, ids)
    transcripts = {name: CLIPS[name] for name in CLIPS}
    TRANSCRIPTS.write_text(
        json.dumps(
            {
                "transcripts": transcripts,
                "seconds": {name: round(lengths[name], 3) for name in CLIPS},
                "silence": f"{SILENCE}.wav",
                "converted": {f"{name}.{fmt}": name for name, fmt in CONVERTED},
            },
            indent=2,
        )
        + "\n"
    )
    logger.info("wrote %s and %s", OUTPUT_DIR, AUDIO_DIR)
    return 0


if __name__ == "__main__":
    sys.exit(main())
