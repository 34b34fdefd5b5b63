"""A model whose chat template GenAI cannot render is served, not refused (issue 22).

GLM-4.6's real template (tests/fixtures/templates) in the demo model's tokenizer IR, where
optimum-intel's export puts it (``rt_info/chat_template``): before, every chat request was
a 400 "the model's chat template rejected the messages: Expected comma in tuple"; now the
worker renders it with Jinja2 as transformers does. The ``openai`` SDK, whole and with tools.
"""

from __future__ import annotations

import html
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.conftest import ROOT
from tests.server.harness import ServerProcess, running_server

GLM = ROOT / "tests" / "fixtures" / "templates" / "GLM-4.6.jinja"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def with_template(source: Path, folder: Path, template: str) -> Path:
    """A copy of the IR model ``source`` whose tokenizer carries ``template``."""
    shutil.copytree(source, folder)
    xml = folder / "openvino_tokenizer.xml"
    value = html.escape(template, quote=True).replace("\n", "&#10;")
    text, count = re.subn(
        r'<chat_template value="[^"]*"',
        lambda _: f'<chat_template value="{value}"',
        xml.read_text(),
    )
    assert count == 1
    xml.write_text(text)
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("glm")
    model = with_template(tiny_model, root / "glm-demo", GLM.read_text())
    with running_server(root / "home", model) as proc:
        yield proc


def test_a_template_genai_cannot_parse_answers_with_and_without_tools(
    server: ServerProcess,
) -> None:
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0) as client:
        plain = client.chat.completions.create(
            model="glm-demo", messages=[{"role": "user", "content": "Hello"}], max_tokens=8
        )
        assert plain.choices[0].finish_reason in ("stop", "length")
        assert plain.usage is not None and plain.usage.prompt_tokens > 5
        tooled = client.chat.completions.create(
            model="glm-demo",
            messages=[{"role": "user", "content": "weather?"}],
            tools=TOOLS,  # type: ignore[arg-type]
            max_tokens=8,
        )
        assert tooled.usage is not None
        assert tooled.usage.prompt_tokens > plain.usage.prompt_tokens  # the tools are in it
    log = server.log_path.read_text()
    assert log.count("chat template rendered with Jinja2") == 1, "logged once per template"
