"""Transaction-aligned cuts of a binlog range, found on the server without decoding rows,
so the range can be decoded by several readers at once (pipelines/stream/reader.py).

A cut is the end position of an ``Xid`` event or of a ``COMMIT`` query: the end of a
transaction, where a reader can start (every row event after it follows its own table
map) and where a reader stopping at the cut sees the event ending exactly there (both
kinds are among the events the stream's reader asks for).

Invariants (tests/test_parallel_decode.py):
- Cuts are strictly increasing, strictly inside ``(start, end)``, and each is the end
  of a transaction's last event; so the chunks ``[start, c1), [c1, c2), … [cn, end)``
  hold every event of the range exactly once, none cut in half.
- Finding them reads event headers on the server (``SHOW BINLOG EVENTS``), skipping
  ahead by an estimated event count: the server scans the range about once, the client
  receives a few pages of event headers per cut, whatever the backlog's size.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.startup import binlog_files
from cdc_core.source.flavour import flavour_of

PAGE = 200  # event headers fetched per query; a transaction longer than this takes several


@dataclass(frozen=True, slots=True)
class _Event:
    """One row of SHOW BINLOG EVENTS: where an event starts and ends, and whether it ends a transaction."""

    pos: int
    end: int
    commits: bool


def _events(cur, file: str, at: int, skip: int) -> list[_Event]:
    """Event headers of ``file`` from ``at`` (an event's start), skipping ``skip`` events."""
    cur.execute(flavour_of(cur).binlog_events_sql + " IN %s FROM %s LIMIT %s, %s", (file, at, skip, PAGE))
    return [_Event(int(r[1]), int(r[4]), r[2] == "Xid" or (r[2] == "Query" and str(r[5]).strip() == "COMMIT"))
            for r in cur.fetchall()]


def backlog_bytes(cur, start: BinlogPosition, end: BinlogPosition) -> int:
    """Bytes of binlog from ``start`` to ``end`` (positions of one server)."""
    total = 0
    for name, size in binlog_files(cur):
        lo, hi = _span(start, end, name, size)
        total += max(0, hi - lo)
    return total


def _span(start: BinlogPosition, end: BinlogPosition, name: str, size: int) -> tuple[int, int]:
    """The part of binlog ``name`` (``size`` bytes) inside [start, end), as offsets; empty if none."""
    p = start.at(name, 0)
    if p.file_number < start.file_number or p.file_number > end.file_number:
        return 0, 0
    lo = start.pos if p.file_number == start.file_number else 4  # 4: after the file's magic number
    hi = end.pos if p.file_number == end.file_number else size
    return lo, hi


def cuts(cur, start: BinlogPosition, end: BinlogPosition, chunk_bytes: int) -> list[BinlogPosition]:
    """Transaction ends inside (start, end), each the first at least ``chunk_bytes`` of binlog
    after the previous cut (or ``start``). ``start`` is a transaction boundary."""
    found: list[BinlogPosition] = []
    since = 0  # bytes since the last cut, carried over from earlier files
    seen_bytes, seen_events = 0, 0  # the average event size so far: how many events to skip to reach a target
    for name, size in binlog_files(cur):
        lo, hi = _span(start, end, name, size)
        if hi <= lo:
            continue
        at, target = lo, lo + chunk_bytes - since
        scale = 1  # halved while a skip lands past the file's end
        while target < hi:
            skip = (target - at) * seen_events // (seen_bytes * scale) if seen_bytes and target > at else 0
            events = _events(cur, name, at, skip)
            if not events:
                if not skip:  # the file's end
                    break
                scale *= 2  # skipped past the end: the events here are larger than the average
                continue
            seen_bytes += events[-1].end - events[0].pos
            seen_events += len(events)
            cut = next((e.end for e in events if e.commits and e.end >= target), None)
            if cut is None:  # inside a long transaction (or short of the target): read on
                at = events[-1].end
                continue
            if cut >= hi:
                break
            found.append(start.at(name, cut))
            at, target = cut, cut + chunk_bytes
        last = found[-1].pos if found and found[-1].file == name else None
        since = hi - last if last is not None else since + hi - lo
    return found
