"""Hub repos for the search tests (engine and dialog): OpenVINO IRs and a GGUF repo, with
download counts, served by the local hub stand-in."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import TINY_GGUF, TINY_MODEL

POPULAR_OV = "OpenVINO/tiny-chat-int4-ov"
QUIET_OV = "OpenVINO/tiny-chat-int8-ov"
GGUF_REPO = "someone/Tiny-Chat-GGUF"
OTHER = "OpenVINO/bge-small-int8-ov"
Q4 = "tiny-chat-Q4_K_M.gguf"


def add_search_repos(root: Path) -> None:
    """Four repos: three match "tiny" (two IRs, one GGUF with three files), one does not."""
    for repo, downloads in ((POPULAR_OV, 900), (QUIET_OV, 40), (OTHER, 5000)):
        shutil.copytree(TINY_MODEL, root / repo)
        meta = {"downloads": downloads, "likes": downloads // 10}
        (root / repo / ".hub.json").write_text(json.dumps(meta))
    folder = root / GGUF_REPO
    folder.mkdir(parents=True)
    for name in ("tiny-chat-Q8_0.gguf", Q4, "mmproj-tiny-chat-f16.gguf"):
        shutil.copy(TINY_GGUF, folder / name)
    (folder / "README.md").write_text("# Tiny chat, GGUF\n")
    (folder / ".hub.json").write_text(json.dumps({"downloads": 2500, "likes": 30}))
