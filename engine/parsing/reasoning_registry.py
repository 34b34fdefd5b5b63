"""A reasoning splitter per :class:`~engine.parsing.reasoning.ReasoningFormat`.

Apart from :mod:`engine.parsing.reasoning` so the harmony splitter (which uses that module's
types) and the tag splitter meet here without an import circle. Pure; the splitters it
builds are one per request.
"""

from __future__ import annotations

from engine.parsing.harmony_channels import HarmonySplitter
from engine.parsing.reasoning import TAGS, ReasoningFormat, ReasoningParser, ReasoningSplitter


def new_reasoning_parser(
    fmt: ReasoningFormat | str = ReasoningFormat.THINK, *, starts_in_reasoning: bool = False
) -> ReasoningParser:
    """A fresh splitter for one reply whose reasoning is marked the ``fmt`` way."""
    kind = ReasoningFormat(fmt)
    if kind is ReasoningFormat.HARMONY:
        return HarmonySplitter()
    start, end, label = TAGS[kind]
    return ReasoningSplitter(
        starts_in_reasoning=starts_in_reasoning, start=start, end=end, label=label
    )
