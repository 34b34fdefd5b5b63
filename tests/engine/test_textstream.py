"""Stop strings are cut exactly, even across tokens, and never leak a partial match."""

from __future__ import annotations

from engine.worker.textstream import StopMatcher


def feed_all(matcher: StopMatcher, pieces: list[str]) -> str:
    out = "".join(matcher.feed(p) for p in pieces)
    return out if matcher.matched else out + matcher.flush()


def test_no_stops_passes_text_through() -> None:
    assert feed_all(StopMatcher(()), ["a", "b"]) == "ab"


def test_stop_inside_one_piece() -> None:
    matcher = StopMatcher(("END",))
    assert feed_all(matcher, ["hello END world"]) == "hello "
    assert matcher.matched


def test_stop_split_across_pieces_is_held_back() -> None:
    matcher = StopMatcher(("</s>",))
    assert matcher.feed("one </") == "one "
    assert matcher.feed("s> two") == ""
    assert matcher.matched


def test_partial_match_released_when_it_turns_out_not_to_be_a_stop() -> None:
    matcher = StopMatcher(("STOP",))
    assert matcher.feed("ST") == ""
    assert matcher.feed("ART") == "START"
    assert not matcher.matched


def test_partial_at_the_end_is_flushed() -> None:
    assert feed_all(StopMatcher(("xyz",)), ["abc x"]) == "abc x"


def test_earliest_of_several_stops_wins() -> None:
    matcher = StopMatcher(("two", "one"))
    assert feed_all(matcher, ["zero one two"]) == "zero "
    assert matcher.sequence == "one"  # reported as the reply's stop_sequence


def test_no_match_reports_no_sequence() -> None:
    matcher = StopMatcher(("xyz",))
    assert feed_all(matcher, ["abc x"]) == "abc x"
    assert matcher.sequence is None
