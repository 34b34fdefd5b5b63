"""The ``openai`` npm package assembles Sidelight's streamed tool calls.

Runs ``tests/js/tool_stream.mjs`` (``ChatCompletionStream.finalChatCompletion()``) against a
real ``sidelight serve``. Needs Node.js and ``npm ci`` in ``tests/js`` (``packaging/dev.py``
does it when node is present); skipped otherwise.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from tests.conftest import ROOT, dialogue
from tests.server.harness import ServerProcess

JS_DIR = ROOT / "tests" / "js"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("node") is None or not (JS_DIR / "node_modules" / "openai").is_dir(),
        reason="needs node and `npm ci` in tests/js",
    ),
]
# ``server`` is the package's shared one (tests/server/conftest.py): these tests only read.


def test_final_chat_completion_has_the_tool_call(server: ServerProcess, dialogues: Any) -> None:
    tool = dialogue(dialogues, "tool")
    model = str(server.wait_ready()["model"])
    request = {"messages": tool["messages"], "tools": tool["tools"], "temperature": 0}
    result = subprocess.run(
        ["node", "tool_stream.mjs", f"{server.base_url}/v1", model, json.dumps(request)],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    choice = json.loads(result.stdout)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    calls = choice["message"]["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert calls[0]["id"].startswith("call_") and calls[0]["type"] == "function"
