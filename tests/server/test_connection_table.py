"""ConnectionTable: which connection goes when the socket backstop or a peer's share is full
(pure: fake connections; tests/server/test_runner.py drives it with real sockets)."""

from __future__ import annotations

from engine.server.connection_table import MAX_OPEN, ConnectionTable, open_cap


class _Conn:
    def __init__(self, name: str, *, busy: bool = False) -> None:
        self.name = name
        self.busy = busy
        self.evicted = False

    def in_flight(self) -> bool:
        return self.busy

    def evict(self) -> None:
        self.evicted = True

    def __repr__(self) -> str:
        return self.name


def _fill(table: ConnectionTable, count: int, peer: str = "127.0.0.1") -> list[_Conn]:
    conns = [_Conn(f"{peer}#{i}") for i in range(count)]
    assert all(table.admit(conn, peer) for conn in conns)
    return conns


def test_a_newcomer_over_the_cap_closes_the_longest_idle() -> None:
    table = ConnectionTable(max_open=3)
    first, second, third = _fill(table, 3)
    newcomer = _Conn("new")
    assert table.admit(newcomer, "127.0.0.1")
    assert (first.evicted, second.evicted, third.evicted) == (True, False, False)
    assert len(table) == 3 and table.evicted == 1


def test_a_connection_answering_a_request_is_never_closed_for_room() -> None:
    table = ConnectionTable(max_open=3)
    first, second, _ = _fill(table, 3)
    first.busy = True
    assert table.admit(_Conn("new"), "127.0.0.1")
    assert not first.evicted and second.evicted


def test_idle_counts_from_the_last_answer() -> None:
    """A connection that just answered is the most recently idle: the next oldest goes."""
    table = ConnectionTable(max_open=3)
    first, second, _ = _fill(table, 3)
    table.idle(first)
    assert table.admit(_Conn("new"), "127.0.0.1")
    assert not first.evicted and second.evicted


def test_the_newcomer_is_refused_only_when_every_other_is_busy() -> None:
    table = ConnectionTable(max_open=2)
    for conn in _fill(table, 2):
        conn.busy = True
    assert not table.admit(_Conn("new"), "127.0.0.1")
    assert len(table) == 2 and table.refused == 1


def test_a_remote_peer_over_its_share_closes_its_own_oldest() -> None:
    table = ConnectionTable(max_open=100, max_per_peer=2)
    local = _fill(table, 5)
    other = _fill(table, 2, "192.0.2.9")
    mine = _fill(table, 2, "192.0.2.7")
    assert table.admit(_Conn("third"), "192.0.2.7")
    assert [c.evicted for c in mine] == [True, False]
    assert not any(c.evicted for c in local + other)  # older, but not this peer's
    assert table.peer_count("192.0.2.7") == 2 and table.peer_count("127.0.0.1") == 0


def test_a_remote_peer_whose_connections_are_all_busy_is_refused() -> None:
    table = ConnectionTable(max_open=100, max_per_peer=2)
    for conn in _fill(table, 2, "2001:db8::1"):
        conn.busy = True
    assert not table.admit(_Conn("third"), "2001:db8::1")
    assert table.admit(_Conn("elsewhere"), "2001:db8::2")


def test_loopback_in_every_form_is_one_uncapped_peer() -> None:
    table = ConnectionTable(max_open=100, max_per_peer=2)
    for peer in ("127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"):
        _fill(table, 3, peer)
    assert all(table.admit(_Conn("unix socket"), None) for _ in range(3))  # no address
    assert table.evicted == 0 and len(table) == 15


def test_closing_twice_and_closing_an_evicted_one_are_harmless() -> None:
    table = ConnectionTable(max_open=1)
    (first,) = _fill(table, 1, "192.0.2.7")
    assert table.admit(_Conn("second"), "192.0.2.7")
    table.closed(first)  # its connection_lost, after the eviction removed it
    table.closed(first)
    table.idle(first)  # an answer ending on it meanwhile
    assert len(table) == 1 and table.peer_count("192.0.2.7") == 1


def test_the_cap_stays_below_the_descriptor_limit() -> None:
    assert 16 <= open_cap() <= MAX_OPEN
