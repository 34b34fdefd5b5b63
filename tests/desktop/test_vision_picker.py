"""The chat's model picker lists a stored vision model and marks that it sees (issue 23)."""

from __future__ import annotations

from pathlib import Path

from desktop.app import DesktopApp
from tests.server.harness import store_ir_copy

TINY_VLM = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-vlm"


def test_the_picker_marks_a_model_that_sees(desktop: DesktopApp) -> None:
    controller = desktop.controller
    store_ir_copy(controller.store.root, "tiny-vlm", TINY_VLM, task="vision", reasoning=False)
    controller.refresh_models()
    labels = {choice.id: choice.label for choice in controller.models()}
    assert labels["tiny-vlm"] == "tiny-vlm (sees images)"
    assert not any(
        label.endswith("(sees images)") for id_, label in labels.items() if id_ != "tiny-vlm"
    )
