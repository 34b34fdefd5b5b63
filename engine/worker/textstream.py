"""Per-request text assembly: incremental detokenization and stop strings.

Runs in the engine worker. GenAI's ``TextStreamer`` holds back bytes until they form whole
UTF-8 characters, so no client ever sees half of a multi-byte character. On top of that we
hold back text that might be the start of a stop string, so a stop string never reaches a
client even when it spans several tokens.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from typing import Any


class StopMatcher:
    """Finds stop strings in streamed text and holds back possible partial matches."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._held = ""
        self.matched = False
        self.sequence: str | None = None  # the stop string that matched

    def feed(self, text: str) -> str:
        """Add ``text``; return what can be released now (stops at a full match)."""
        if not self._stops:
            return text
        buffer = self._held + text
        hits = [(at, stop) for stop in self._stops if (at := buffer.find(stop)) >= 0]
        if hits:
            cut, self.sequence = min(hits)  # the earliest
            self._held = ""
            self.matched = True
            return buffer[:cut]
        keep = self._longest_partial(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

    def flush(self) -> str:
        """Release what was held back (generation ended without a match)."""
        held, self._held = self._held, ""
        return held

    def _longest_partial(self, buffer: str) -> int:
        best = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(buffer)), best, -1):
                if buffer.endswith(stop[:size]):
                    best = size
                    break
        return best


class IncrementalDetokenizer:
    """Turns token ids into text pieces that are always whole characters.

    The vLLM scheme: decode a short window of recent tokens twice (without and with the new
    ones) and release the difference, unless it ends in U+FFFD (an unfinished multi-byte
    character), in which case wait for the next token. Unlike GenAI's ``TextStreamer`` it
    releases text as soon as it is complete, so it adds no delay to the first token.

    Special tokens are decoded too (``skip_special_tokens=False``): GenAI's GGUF tokenizer
    counts every added token as special, so skipping them would drop ``<tool_call>`` and
    ``<think>`` there. Instead the tokens that only end a turn (``hidden_ids``: EOS, stop
    tokens, BOS/pad) are dropped before decoding, on every model format alike.

    With a byte ``table`` (byte-level BPE, see :mod:`engine.worker.bytelevel`) the text is
    the tokens' bytes through an incremental UTF-8 decoder instead, which holds back an
    unfinished character the same way at a fraction of the cost.

    Not thread-safe; one per request, used only on the worker's loop.
    """

    def __init__(
        self,
        tokenizer: Any,
        stops: tuple[str, ...] = (),
        hidden_ids: frozenset[int] = frozenset(),
        table: Mapping[int, bytes] | None = None,
    ) -> None:
        self._tokenizer = tokenizer
        self._table = table
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._hidden = hidden_ids
        self._ids: list[int] = []
        self._prefix = 0  # start of the window decoded for context
        self._read = 0  # tokens before this index have been released as text
        self.stop = StopMatcher(stops)

    def push(self, token_ids: list[int]) -> str:
        """Decode new tokens; return the text that is safe to send now."""
        if self.stop.matched:
            return ""
        shown = [t for t in token_ids if t not in self._hidden]
        if self._table is not None:
            table = self._table
            return self.stop.feed(self._utf8.decode(b"".join(table.get(t, b"") for t in shown)))
        self._ids.extend(shown)
        return self.stop.feed(self._decode_new(final=False))

    def token_text(self, token_id: int) -> str:
        """One token on its own (for logprobs; may be part of a multi-byte character)."""
        if token_id in self._hidden:
            return ""
        if self._table is not None:
            return self._table.get(token_id, b"").decode("utf-8", "replace")
        return str(self._tokenizer.decode([token_id], skip_special_tokens=False))

    def finish(self) -> str:
        """Release any held-back text at the end of generation."""
        if self.stop.matched:
            return ""
        if self._table is not None:
            text = self.stop.feed(self._utf8.decode(b"", final=True))
        else:
            text = self.stop.feed(self._decode_new(final=True))
        return text + ("" if self.stop.matched else self.stop.flush())

    def _decode_new(self, *, final: bool) -> str:
        if self._read >= len(self._ids):
            return ""

        def decode(ids: list[int]) -> str:
            return str(self._tokenizer.decode(ids, skip_special_tokens=False))

        before = decode(self._ids[self._prefix : self._read]) if self._read > self._prefix else ""
        after = decode(self._ids[self._prefix :])
        if len(after) <= len(before) or (after.endswith("\ufffd") and not final):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return str(after[len(before) :])
