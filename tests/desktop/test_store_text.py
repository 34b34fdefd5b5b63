"""The model manager's words: sizes, progress lines, and the store's errors said for the GUI.

The errors are raised by the real store code (a real network error, a real store, a real
conversion refusal), so a change of wording in ``engine/store`` that brings a command back
into the app fails here.
"""

from __future__ import annotations

import errno
import hashlib
import re
import sys
from pathlib import Path

import httpx
import pytest

from desktop.store_text import (
    describe_progress,
    gui_message,
    human_duration,
    human_size,
    progress_figures,
)
from engine.store import ModelStore, StoreError
from engine.store.convert import ConvertRequest, MemoryEstimate, check_tools, convert
from engine.store.download import _verify
from engine.store.errors import ModelDamaged, disk_error
from engine.store.gguf_import import import_gguf
from engine.store.hub import RemoteFile, hub_error
from engine.store.progress import ByteMeter, Progress
from tests.conftest import TINY_GGUF

SETTINGS_FILE = Path("/home/ana/.config/sidelight/config.json")
CLI_WORDS = re.compile(r"sidelight (rm|list|import|convert|pull)|--\w|SIDELIGHT_|command|\bpull\b")


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 bytes"),
        (999, "999 bytes"),
        (347_168, "347 KB"),  # the tiny GGUF, once shown as "0 MB"
        (999_999, "1 MB"),
        (1_400_000, "1.4 MB"),
        (12_000_000, "12 MB"),
        (12_345_678, "12.3 MB"),
        (350_000_000, "350 MB"),
        (2_300_000_000, "2.3 GB"),
        (15_000_000_000_000, "15 TB"),
    ],
)
def test_human_sizes(size: int, text: str) -> None:
    assert human_size(size) == text


def test_progress_lines() -> None:
    progress = Progress(
        phase="downloading", done=1_200_000, total=3_400_000, speed=150_000, item="model.bin"
    )
    assert progress_figures(progress) == "35% · 1.2 MB of 3.4 MB · 150 KB/s · 15 s left"
    assert describe_progress(progress) == (
        "Downloading model.bin: 35% · 1.2 MB of 3.4 MB · 150 KB/s · 15 s left"
    )
    assert describe_progress(progress, "import").startswith("Copying model.bin: 35%")
    assert progress_figures(Progress(phase="listing", item="org/x")) == ""
    assert describe_progress(Progress(phase="listing", item="org/x")) == (
        "Asking the hub for the files of org/x…"
    )
    assert (human_duration(45), human_duration(200), human_duration(3900)) == (
        "45 s",
        "3 min",
        "1 h 5 min",
    )


def _raised(make: object) -> str:
    """The message of what ``make()`` raised (a StoreError)."""
    with pytest.raises(StoreError) as raised:
        make()  # type: ignore[operator]
    return str(raised.value)


def _store_errors(tmp_path: Path) -> dict[str, str]:
    """CLI messages from the store's own code paths, by what went wrong."""
    store = ModelStore(tmp_path / "models")
    import_gguf(store, TINY_GGUF)
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"architectures": ["Qwen2ForCausalLM"]}')
    too_big = MemoryEstimate(needed=64 * 1024**3, total=16 * 1024**3, available=8 * 1024**3)
    part = tmp_path / "model.bin"
    part.write_bytes(b"not what the hub published")
    corrupt = RemoteFile("model.bin", part.stat().st_size, hashlib.sha256().hexdigest(), None)
    return {
        "no network": str(hub_error(httpx.ConnectError("connection refused"), "org/model")),
        "read-only": str(disk_error(OSError(errno.EROFS, "Read-only", "/m"), "importing a.gguf")),
        "damaged": str(ModelDamaged("broken-model", "its file model.gguf is missing")),
        "not found": _raised(lambda: store.get("nope")),
        "id taken": _raised(lambda: import_gguf(store, TINY_GGUF)),
        "too big": _raised(
            lambda: convert(store, ConvertRequest(source=str(checkpoint)), estimate=too_big)
        ),
        "no tools": _raised(lambda: check_tools(Path(sys.executable))),
        "corrupt": _raised(lambda: _verify(part, corrupt, ByteMeter(0, None, None))),
    }


def test_store_errors_name_no_commands_in_the_gui(tmp_path: Path) -> None:
    cli = _store_errors(tmp_path)
    assert all(CLI_WORDS.search(message) for message in cli.values()), "the CLI keeps its words"
    gui = {what: gui_message(message, SETTINGS_FILE) for what, message in cli.items()}
    for what, message in gui.items():
        assert not CLI_WORDS.search(message), (what, message)
        # A sentence: no plain lower-case word first (a file name such as model.bin may be).
        assert message.endswith(".") and not re.match(r"[a-z]+\s", message), (what, message)
    assert gui["no network"] == (
        "Cannot reach the model hub (no network?): check the connection, then try again; "
        "what was already downloaded is kept."
    )
    assert gui["read-only"].endswith(
        "is on a read-only disk; choose another model folder in Settings."
    )
    assert gui["damaged"] == (
        "Model 'broken-model' is damaged: its file model.gguf is missing "
        "(delete its folder broken-model in the model folder)."
    )
    assert gui["not found"] == "No model 'nope' in the store."
    assert gui["id taken"] == (
        "A model 'sidelight-demo-f16' is already installed; delete it first to add it again."
    )
    assert gui["too big"].endswith(
        "this machine has 16.0 GB. Pick a pre-converted model from the list above, or a "
        "smaller one."
    )
    assert gui["no tools"].startswith(
        "Converting models needs the conversion tools: pip install 'sidelight[convert]' "
        f'(or set "convert_python" in the settings file {SETTINGS_FILE} to a Python that has '
        "them)"
    )
    assert gui["corrupt"].endswith("it was deleted and will be downloaded again next time.")
