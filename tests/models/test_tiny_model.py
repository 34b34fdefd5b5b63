"""The shipped tiny models still give every canned reply exactly, in IR and GGUF form.

Runs ``check_tiny_model.py`` (real GenAI: LLMPipeline, ContinuousBatchingPipeline and the
GGUF loader) on the demo model and on the tiny code model (fill-in-the-middle), so a change to
a fixture or to OpenVINO that breaks determinism fails here, before it shows up as a confusing
end-to-end failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DIALOGUES, ROOT, TINY_CODER, TINY_CODER_GGUF

CHECK = Path(__file__).with_name("check_tiny_model.py")
CODER_DIALOGUES = ROOT / "tests" / "models" / "coder_dialogues.json"
FIM_TOKENS = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]


@pytest.mark.parametrize(
    ("args", "dialogues_path", "fim_tokens"),
    [
        ([], DIALOGUES, []),  # the demo model: defaults, no FIM tokens
        (
            ["--model-dir", TINY_CODER, "--gguf", TINY_CODER_GGUF, "--dialogues", CODER_DIALOGUES],
            CODER_DIALOGUES,
            FIM_TOKENS,
        ),
    ],
    ids=["demo", "coder"],
)
def test_every_dialogue_is_reproduced_exactly(
    tmp_path: Path, args: list[Path | str], dialogues_path: Path, fim_tokens: list[str]
) -> None:
    report = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, str(CHECK), *map(str, args), "--report", str(report)],
        capture_output=True,
        check=False,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(report.read_text())
    dialogues = json.loads(dialogues_path.read_text(encoding="utf-8"))
    expected = {d["name"] for d in dialogues["dialogues"]}
    expected |= {f["name"] for f in dialogues.get("fill_in_middle", [])}
    for pipeline in ("ir", "cb", "gguf"):
        results = data[pipeline]["dialogues"]
        assert expected <= set(results), pipeline
        assert all(r["ok"] for r in results.values()), pipeline
        assert data[pipeline]["fim_tokens"] == fim_tokens, pipeline
