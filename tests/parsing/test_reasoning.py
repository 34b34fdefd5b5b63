"""ReasoningSplitter: think blocks apart from answers, however the text is split."""

from __future__ import annotations

import pytest

from engine.parsing import ReasoningSplitter, template_supports_reasoning

THINK = "<think>\n2 plus 2 is 4.\n</think>\n\nThe answer is 4."


def split(text: str, size: int, **kw: bool) -> tuple[str, str]:
    splitter = ReasoningSplitter(**kw)
    reasoning, content = "", ""
    for i in range(0, len(text), size):
        delta = splitter.feed(text[i : i + size])
        reasoning, content = reasoning + delta.reasoning, content + delta.content
    delta = splitter.finish()
    return reasoning + delta.reasoning, content + delta.content


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_think_block_is_split_from_the_answer(size: int) -> None:
    assert split(THINK, size) == ("2 plus 2 is 4.", "The answer is 4.")


@pytest.mark.parametrize("size", [1, 4, 1000])
def test_plain_replies_and_late_tags_are_content(size: int) -> None:
    assert split("Hello!", size) == ("", "Hello!")
    assert split("Use <think> tags", size) == ("", "Use <think> tags")
    assert split("<thin", size) == ("", "<thin")


def test_template_opened_block_and_cut_off_reasoning() -> None:
    assert split("A thought.\n</think>\n\nAnswer.", 2, starts_in_reasoning=True) == (
        "A thought.",
        "Answer.",
    )
    assert split("<think>\nStill thinking about", 3) == ("Still thinking about", "")


def test_reasoning_whitespace_inside_is_kept() -> None:
    assert split("<think>a\n\nb</think>c", 1) == ("a\n\nb", "c")


def test_template_detection() -> None:
    assert template_supports_reasoning("{% if enable_thinking %}")
    assert not template_supports_reasoning("{{ messages }}")
    assert not template_supports_reasoning(None)


def test_leading_whitespace_is_kept_without_a_block() -> None:
    splitter = ReasoningSplitter()
    out = splitter.feed(" jumps over")
    rest = splitter.finish()
    assert out.content + rest.content == " jumps over"
    assert out.reasoning == rest.reasoning == ""
