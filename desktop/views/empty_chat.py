"""What a new, empty chat shows (issue 28, "How it looks"): the model that will answer, what
it can do (tools, thinking, images) and a few starter prompts; clicking one fills the
message box.

A new chat used to be an empty white box with no hint of what to do. The starter prompts of
the demo model are the dialogues it was trained on (tests/models/dialogues.json), so a first
chat with it gets real answers rather than its fallback reply.

Threading: :func:`intro_for` reads a few small files of the model (its config and chat
template, cached per path) and runs on the GUI thread; :func:`write_intro` is GUI-thread
only.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextFrameFormat

from desktop import theme
from desktop.controller import ModelChoice
from engine.store.facts import gguf_facts, ir_facts

logger = logging.getLogger(__name__)

STARTER_SCHEME = "starter"  # a starter prompt's link: starter:<index in Intro.starters>
Ability = Literal["tools", "thinking", "vision"]
ABILITY_TEXT: dict[Ability, str] = {
    "tools": "calls tools",
    "thinking": "thinks before answering",
    "vision": "sees images",
}
# What the demo model was trained to answer (anything else gets its fallback reply).
DEMO_STARTERS = ("Hello", "Count to twenty", "Think first: what is 2+2?", "Say hello in Chinese")
STARTERS = (
    "Explain how a hash map works, with a short Python example.",
    "Summarize the main points of a text I paste next.",
    "Write a friendly reminder email about Friday's release.",
)
THINKING_STARTER = "Think it through: how many weekdays are in March 2027?"
VISION_STARTER = "Describe the picture I attach (Image… or Ctrl+V)."


@dataclass(frozen=True)
class Intro:
    """What the empty chat says: the model's name, its abilities and the starter prompts."""

    model: str
    abilities: tuple[Ability, ...]
    starters: tuple[str, ...]
    demo: bool = False


@functools.lru_cache(maxsize=64)
def abilities_of(path: Path) -> tuple[Ability, ...]:
    """What the model at ``path`` can do, from its files (nothing is loaded)."""
    try:
        facts = gguf_facts(path) if path.is_file() else ir_facts(path)
    except OSError as exc:  # a model removed under us: say nothing rather than fail
        logger.info("cannot read %s's facts: %s", path, exc)
        return ()
    capabilities = facts.capabilities
    found: list[Ability] = []
    if capabilities.get("tools"):
        found.append("tools")
    if capabilities.get("reasoning"):
        found.append("thinking")
    if capabilities.get("vision") or facts.task == "vision":
        found.append("vision")
    return tuple(found)


def intro_for(choice: ModelChoice | None) -> Intro | None:
    """The empty chat's intro for the chat's model (None: no model to name)."""
    if choice is None:
        return None
    if choice.is_demo:
        return Intro(choice.label, abilities_of(choice.path), DEMO_STARTERS, demo=True)
    abilities = abilities_of(choice.path)
    if choice.vision and "vision" not in abilities:
        abilities = (*abilities, "vision")
    starters = list(STARTERS)
    if "thinking" in abilities:
        starters.insert(0, THINKING_STARTER)
    if "vision" in abilities:
        starters.insert(0, VISION_STARTER)
    return Intro(choice.label, abilities, tuple(starters[:4]))


def abilities_text(intro: Intro) -> str:
    """One line: what the model can do ("Chats in text" when it has none of the three)."""
    if not intro.abilities:
        return "Chats in text."
    named = [ABILITY_TEXT[a] for a in intro.abilities]
    joined = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"
    return f"Chats in text, {joined}."


def write_intro(cursor: QTextCursor, intro: Intro) -> list[tuple[int, int]]:
    """Write the intro at ``cursor`` (an empty document); return each starter link's
    (start, end) position."""
    centre = QTextBlockFormat()
    centre.setAlignment(Qt.AlignmentFlag.AlignHCenter)
    space = QTextFrameFormat()  # the first block's own top margin is not drawn: a frame's is
    space.setTopMargin(4)
    space.setPadding(8)
    cursor.insertFrame(space)
    cursor.setBlockFormat(centre)
    base = QFont().pointSizeF()
    title = QTextCharFormat()
    title.setFontPointSize(base * 1.45)
    title.setFontWeight(QFont.Weight.DemiBold)
    cursor.insertText(intro.model, title)
    spaced = QTextBlockFormat(centre)
    spaced.setTopMargin(4)
    dim = QTextCharFormat()
    dim.setForeground(theme.colour("dim"))
    cursor.insertBlock(spaced, dim)
    cursor.insertText(abilities_text(intro), dim)
    if intro.demo:
        cursor.insertBlock(spaced, dim)
        cursor.insertText(
            "A tiny model for trying the app: it knows only a few prompts. "
            "Download a real model from More → Download models…",
            dim,
        )
    heading = QTextBlockFormat(centre)
    heading.setTopMargin(16)
    cursor.insertBlock(heading, dim)
    cursor.insertText("Try one:", dim)
    links: list[tuple[int, int]] = []
    for index, prompt in enumerate(intro.starters):
        row = QTextBlockFormat(centre)
        row.setTopMargin(6)
        cursor.insertBlock(row, QTextCharFormat())
        link = QTextCharFormat()
        link.setForeground(theme.colour("link"))
        link.setBackground(theme.colour("action_background"))
        link.setAnchor(True)
        link.setAnchorHref(f"{STARTER_SCHEME}:{index}")
        link.setToolTip("Put this prompt in the message box")
        start = cursor.position()
        cursor.insertText(f"\u2002{prompt}\u2002", link)  # en spaces: the pill's padding
        links.append((start, cursor.position()))
    cursor.setCharFormat(QTextCharFormat())
    return links
