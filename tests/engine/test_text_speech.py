"""Text to speech without a server: cutting input into pieces, encoding, the model folder."""

from __future__ import annotations

import io
import shutil
import wave
from pathlib import Path

import av
import numpy as np
import pytest

from engine.audio.encode import at_speed, encode, pcm16, wav_header
from engine.audio.pieces import MAX_PIECE_CHARS, pieces
from engine.models import ModelError, spec_from_path, verify_files
from engine.supervisor.kinds import kind_of

TINY_SPEECHT5 = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-speecht5"


def test_short_text_is_one_piece() -> None:
    assert pieces("  hello world  ") == ["hello world"]


def test_long_text_is_cut_at_sentences_then_spaces_and_keeps_every_word() -> None:
    text = "First sentence here. " + "word " * 80 + "x" * 400
    cut = pieces(text)
    assert cut[0] == "First sentence here."
    assert all(0 < len(piece) <= MAX_PIECE_CHARS for piece in cut)
    assert "".join(cut).replace(" ", "") == text.replace(" ", "")


def test_short_sentences_are_packed_into_one_piece() -> None:
    assert pieces("One. Two! Three?") == ["One. Two! Three?"]
    assert len(pieces("the cat sat on the mat. " * 8)) == 2


def test_pcm16_clips_and_scales() -> None:
    samples = np.array([0.0, 1.0, -1.0, 2.0, 0.5], dtype=np.float32)
    assert np.frombuffer(pcm16(samples), "<i2").tolist() == [0, 32767, -32767, 32767, 16384]


def test_wav_has_exact_sizes_and_a_streamed_header_says_unknown() -> None:
    samples = np.zeros(1000, dtype=np.float32)
    with wave.open(io.BytesIO(encode(samples, 16000, "wav"))) as clip:
        assert (clip.getnframes(), clip.getframerate(), clip.getnchannels()) == (1000, 16000, 1)
    assert wav_header(16000, None)[40:44] == b"\xff\xff\xff\xff"


@pytest.mark.parametrize("fmt", ["flac", "mp3"])
def test_compressed_formats_keep_the_length(fmt: str) -> None:
    samples = (np.sin(np.arange(16000) / 8) * 0.3).astype(np.float32)
    with av.open(io.BytesIO(encode(samples, 16000, fmt))) as container:  # type: ignore[arg-type]
        assert sum(frame.samples for frame in container.decode(audio=0)) == 16000


@pytest.mark.parametrize(("speed", "count"), [(1.0, 1000), (2.0, 500), (0.25, 4000)])
def test_speed_resamples(speed: float, count: int) -> None:
    assert len(at_speed(np.ones(1000, dtype=np.float32), speed)) == count


def test_a_speecht5_folder_is_a_speech_model() -> None:
    spec = spec_from_path(TINY_SPEECHT5)
    assert (spec.task, spec.architecture, spec.format) == ("speech", "speecht5", "ir")
    assert kind_of(spec.task).loads_at_start is False
    verify_files(spec)


def test_a_speecht5_folder_without_its_vocoder_weights_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "broken-speecht5"
    shutil.copytree(TINY_SPEECHT5, folder)
    (folder / "openvino_vocoder.bin").unlink()
    with pytest.raises(ModelError, match=r"openvino_vocoder\.bin"):
        spec_from_path(folder)


def test_a_cut_vocoder_is_damage_named_by_file(tmp_path: Path) -> None:
    folder = tmp_path / "cut-speecht5"
    shutil.copytree(TINY_SPEECHT5, folder)
    weights = folder / "openvino_vocoder.bin"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ModelError, match=r"openvino_vocoder\.bin is cut short"):
        verify_files(spec_from_path(folder))
