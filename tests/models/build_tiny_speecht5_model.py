"""Build the tiny random SpeechT5 used by the ``/v1/audio/speech`` tests.

What it builds
--------------
``tests/fixtures/tiny-speecht5/``: a SpeechT5 text-to-speech model (hidden size 32, one
encoder and one decoder layer, a character SentencePiece vocabulary of 22 pieces) with a tiny
random HiFi-GAN vocoder, exported by optimum-intel (``text-to-audio``) to OpenVINO IR, its
tokenizer converted by openvino-tokenizers: the folder ``Text2SpeechPipeline`` loads (about
2 MB, fp32).

The weights are random: the audio is noise, but its length and format are what the tests
check. The stop head is zeroed (bias -30) so the model never stops early and the output
length is fixed by GenAI's ``maxlenratio`` alone: deterministic, the same on every run.

Why
---
The hub is not reachable. Facts measured on this machine: GenAI's default speaker embedding
(the 7306th CMU Arctic x-vector) is 512 wide, so ``speaker_embedding_dim`` is 512; optimum-intel
does not convert SpeechT5's SentencePiece tokenizer unless ``protobuf`` is installed, so it is
converted here with ``convert_tokenizer``.

How to rerun
------------
In the build venv described in ``tests/models/build_tiny_model.py`` (torch CPU, transformers,
optimum-intel, openvino-tokenizers, sentencepiece, protobuf)::

    nice -n 19 /work/venv-build/bin/python tests/models/build_tiny_speecht5_model.py

Seeded and deterministic on one machine (torch CPU): the same weights and the same
tokenizer bytes on every run (the SentencePiece model's recorded training paths are
cleared). The exported decoder's XML may list its nodes in another order from one export to
the next (the converter's traversal order); the model it describes is the same.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
from pathlib import Path

logger = logging.getLogger("build_tiny_speecht5")

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-speecht5"
SEED = 0
CORPUS = ["hello world", "the cat sat on the mat", "sidelight speaks"] * 5


def build_tokenizer(work: Path) -> Path:
    """A character SentencePiece model of the corpus's letters (ids 0-3: s, pad, /s, unk)."""
    import sentencepiece as spm

    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(work / "spm"),
        model_type="char",
        vocab_size=22,
        bos_id=0,
        pad_id=1,
        eos_id=2,
        unk_id=3,
        character_coverage=1.0,
        num_threads=1,
    )
    # The trainer writes its input and output paths (a temporary folder) into the model:
    # cleared, so a rebuild gives the same bytes.
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    path = work / "spm.model"
    model.ParseFromString(path.read_bytes())
    del model.trainer_spec.input[:]
    model.trainer_spec.model_prefix = ""
    path.write_bytes(model.SerializeToString())
    return path


def build_hf(work: Path, spm_model: Path) -> tuple[Path, Path]:
    """The random SpeechT5 (stop head zeroed) and HiFi-GAN, saved in transformers' layout."""
    import torch
    from transformers import (
        SpeechT5Config,
        SpeechT5FeatureExtractor,
        SpeechT5ForTextToSpeech,
        SpeechT5HifiGan,
        SpeechT5HifiGanConfig,
        SpeechT5Processor,
        SpeechT5Tokenizer,
    )

    torch.manual_seed(SEED)
    config = SpeechT5Config(
        vocab_size=22,
        hidden_size=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        speech_decoder_prenet_units=32,
        speech_decoder_postnet_units=32,
        speech_decoder_postnet_layers=1,
        speaker_embedding_dim=512,
        max_text_positions=600,
        max_speech_positions=1876,
    )
    model = SpeechT5ForTextToSpeech(config).eval()
    with torch.no_grad():
        prob = model.speech_decoder_postnet.prob_out
        prob.weight.zero_()
        prob.bias.fill_(-30.0)
    hf_dir = work / "hf"
    model.save_pretrained(hf_dir)
    tokenizer = SpeechT5Tokenizer(str(spm_model))
    processor = SpeechT5Processor(SpeechT5FeatureExtractor(), tokenizer)
    processor.save_pretrained(hf_dir)

    torch.manual_seed(SEED + 1)
    vocoder = SpeechT5HifiGan(
        SpeechT5HifiGanConfig(
            upsample_initial_channel=32,
            upsample_rates=[4, 4, 4, 4],
            upsample_kernel_sizes=[8, 8, 8, 8],
        )
    ).eval()
    voc_dir = work / "vocoder"
    vocoder.save_pretrained(voc_dir)
    return hf_dir, voc_dir


def export(hf_dir: Path, voc_dir: Path) -> None:
    """optimum-intel's text-to-audio export, then the tokenizer by hand."""
    from openvino import save_model
    from openvino_tokenizers import convert_tokenizer
    from optimum.exporters.openvino import main_export
    from transformers import SpeechT5Tokenizer

    if OUT.exists():
        shutil.rmtree(OUT)
    main_export(
        str(hf_dir),
        output=str(OUT),
        task="text-to-audio",
        model_kwargs={"vocoder": str(voc_dir)},
    )
    tokenizer = SpeechT5Tokenizer.from_pretrained(str(hf_dir))
    encoder, decoder = convert_tokenizer(tokenizer, with_detokenizer=True)
    save_model(encoder, str(OUT / "openvino_tokenizer.xml"))
    save_model(decoder, str(OUT / "openvino_detokenizer.xml"))


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        hf_dir, voc_dir = build_hf(work, build_tokenizer(work))
        export(hf_dir, voc_dir)
    size = sum(f.stat().st_size for f in OUT.iterdir())
    logger.info("wrote %s (%d bytes)", OUT, size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
