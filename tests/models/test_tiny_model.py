"""The shipped tiny model still answers every canned dialogue exactly, in IR and GGUF form.

Runs ``check_tiny_model.py`` (real GenAI: LLMPipeline, ContinuousBatchingPipeline and the
GGUF loader) so a change to the fixture or to OpenVINO that breaks determinism fails here,
before it shows up as a confusing end-to-end failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHECK = Path(__file__).with_name("check_tiny_model.py")


def test_every_dialogue_is_reproduced_exactly(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, str(CHECK), "--report", str(report)],
        capture_output=True,
        check=False,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(report.read_text())
    dialogues = json.loads(CHECK.with_name("dialogues.json").read_text(encoding="utf-8"))
    expected = {d["name"] for d in dialogues["dialogues"]}
    for pipeline in ("ir", "cb", "gguf"):
        results = data[pipeline]["dialogues"]
        assert expected <= set(results), pipeline
        assert all(r["ok"] for r in results.values()), pipeline
