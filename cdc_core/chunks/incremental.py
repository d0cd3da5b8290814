"""Online backfill: a table (or a key range of it) read again in chunks while the stream
runs, merged into the live stream so nothing the stream applied meanwhile is lost or
reverted (the algorithm of Netflix's DBLog and Debezium's incremental snapshots, with
binlog positions as watermarks: nothing is written to the source).

The request's chunks are read in order, in *read groups*, by the stream process (the only
writer of the pipeline, pipelines/stream/online_backfill.py): one chunk, or, for a request of
many chunks (``source.snapshot.backfill_spark_min_chunks``), a group of about
``source.snapshot.backfill_group_rows`` rows of chunks per read slot, read several chunks at
once where the snapshot's groups run (``source.snapshot.runner``): in
``pipeline.parallelism`` threads of the stream process (the local runner, Spark never
started), or on Spark, one task per chunk, and until the stream process's Spark is up one
chunk after another in a thread (:func:`read_group_size`; pipelines/backfill/reads.py), the
next group's read starting once the group before it is read, while that one waits for its HW
and merges; either way the stream goes on meanwhile, with its one binlog reader:
  1. between two micro-batches: S := the stream's position; then, per chunk C of the group
     (several chunks at once, each on a connection of its own, in any order): LW := binlog
     end, once every transaction up to it is visible (cdc_core/offset/position.py); rows(C)
     := SELECT the rows of C (one statement: its read view holds every transaction up to LW
     and none past HW); HW := binlog end. Each chunk has its own window [LW, HW]; reads at
     once only make the windows overlap, and every step below holds per chunk;
  2. the stream goes on (also while the chunks are read); every change of the table after S marks
     its row keys (before and after images) as *touched*;
  3. once the group's rows are known and the stream has applied every change up to a
     position P at or past H (the highest HW of the group) and nothing after it (the next
     record is past P, a heartbeat at P, or, between records, the stream's position is P
     at a transaction boundary), the batch is committed and then the group's
     next chunks are merged in one Delta commit (a *merge commit*: the group's next chunks
     in the plan's order, as many as :func:`merge_group_size` lets, bounded by rows and
     bytes): for each chunk C of it (:func:`merge_writes`), the rows of rows(C) whose key
     was not touched are upserted and the *candidates* of C that are neither in rows(C)
     nor touched are deleted; the chunks' writes, over disjoint ranges, are committed
     together (decided for the run's rows and candidates at once: the same writes, as no
     key of one chunk's rows or candidates is in another chunk's range). The group's next
     merge commits follow the same way, right after or, past a time slice, at the next
     records, so the stream's own commits go on between them.

Candidates are the row keys Delta held in the range at some instant after the backfill
started and at or before the group's S: for an integer chunk key, read as of S (the
table's files listed at S, read in a thread while the group's chunks are read) by one
range filter over the group's whole range (split per chunk, :func:`chunk_positions`), with
every change up to S committed (so Delta's rows of the range as of S are known exactly,
and keys are touched from S on: then a key neither touched nor a candidate is not in
Delta, and is appended; a candidate's row that equals the chunk's is not written again);
otherwise when the backfill started (or resumed), each key's chunk found in the server's
order of the chunk key. A key Delta gained later was written by the stream, which
applies every change of the table from the backfill's start on, so its row is MySQL's
row (updates are applied as whole after-images, inserted when missing).

Invariants (tests/test_backfill_parts.py, tests/test_backfill.py; several chunks in one
merge commit: tests/test_backfill.py::test_a_read_group_merges_several_chunks_per_commit;
chunks read at once: tests/test_backfill.py::test_chunks_read_at_once_land_exactly_under_writes):
- After C's merge at P, C's range in Delta equals C's range in MySQL as of P, for any P
  at or past C's HW: S <= LW, so an untouched key had no change in (LW, P] and has the
  same row at the SELECT and at P (so rows(C)'s row, or its absence, is right), a
  touched key's last change up to P was applied by the stream, and a key the stream
  never wrote is a candidate. This needs only S <= LW(C) <= HW(C) <= P for each chunk C,
  not any order between the chunks' windows: chunks read at once, whose windows overlap
  and end in any order, are each exact. So a group's chunks, whose HWs differ, all merge
  past the highest, a merge commit at a time wherever the stream then is (in the plan's order:
  progress stays a count of chunks merged), and a group Spark returns after the stream
  went past H merges where the stream is then. Chunks merged in one commit, over
  disjoint ranges, at the same P: the commit holds exactly the writes each chunk's own
  merge would (tests/test_backfill_parts.py), so each chunk's range equals MySQL's as of P.
- Nothing the stream applied is reverted: a key changed after S is touched (and never
  written by the merge); a change after P is applied after the merge.
- A merge is correct wherever it happens at or past its HW, so it may be repeated: a
  crash between a merge commit and its progress record reads its chunks again (new
  watermarks) and merges them again; chunks read but not merged (a whole group, or the
  rest of one) are simply read again. A merge commit holds whole chunks and lands whole
  or not at all (one Delta commit): no chunk is ever half merged. Progress is recorded
  after a group's last merge commit (each of its chunks merged at least once; never
  marked done before it is; ``chunks_done`` counts exactly the chunks merged, the last
  commit's last chunk + 1; one control-table write per group, not per chunk or commit),
  so a restart resumes at the first chunk after the last group recorded.
- A merge commit is bounded (:func:`merge_group_size`: ``source.snapshot.backfill_group_rows``
  rows, at most ``MERGE_COMMIT_ROWS``, and ``MERGE_COMMIT_BYTES`` of the chunks' rows, at
  least one chunk), so the stream
  waits for at most one such commit at a time: the engine commits its own batches
  between merge commits once a time slice is spent (pipelines/stream/online_backfill.py).
- Groups in flight (one, or two for a request of many chunks) cover consecutive,
  disjoint ranges of one request and merge in the plan's order. Each has its own S, its
  own touched keys (changed after its own S) and its own candidates (for an integer chunk
  key read at its own S); a merge writes only keys of its own chunk's range, so the
  merges of an earlier group, made after a later group's S, leave the later group's
  candidates exact as of its S, and every invariant above holds per group. A later
  group's S is not earlier than the earlier group's: a key moved across both ranges by
  one update is touched in each group whose S precedes it. A paused or cancelled
  request's groups are dropped unmerged; a DDL drops them all (read with the old
  columns); a failed read drops its group (the last: one is read at a time), those
  before it stay.
- A key Delta holds more than once (a hand-made copy) is left once, in the same commit
  position (one MERGE before the chunk's): the merge then writes or keeps it like any key.
- A DDL of the table between a chunk's read and its merge discards the read (its rows
  have the old columns); the chunk is read again with the new schema.
- A table entering the capture (created while the stream was stopped, renamed into a
  captured name, or found changed by a DDL binlake did not see) starts streaming at a
  *baseline* E, a binlog position its schema was described at: its changes at or
  before E are not applied (every chunk is read after E and every key Delta held is a
  candidate, so none is needed).
- Requests are durable (``_binlake/backfill_requests``): every state change is a new
  row, the latest row of a request wins, and a finished or cancelled request stays so.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.chunks.planning import Chunk, decode_value, encode_value
from cdc_core.errors import BadInput
from cdc_core.schema.table import Column
from cdc_core.types.registry import codec_for


class BackfillState(enum.StrEnum):
    """Where a backfill request is."""

    PENDING = "pending"  # waiting for the stream to take it
    RUNNING = "running"  # chunks planned, being read and merged
    PAUSED = "paused"  # kept, not worked on until resumed
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (BackfillState.DONE, BackfillState.CANCELLED, BackfillState.FAILED)


@dataclass(frozen=True)
class BackfillRequest:
    """One backfill: ``table`` (a captured source table), optionally only keys in
    ``[lo, hi)`` of its chunk key; ``chunks`` is its plan once the stream took it, and
    ``chunks_done`` how many of them (in order) are merged."""

    id: str
    table: str
    lo: Any = None
    hi: Any = None
    reason: str = "requested"
    state: BackfillState = BackfillState.PENDING
    chunks: tuple[Chunk, ...] = ()
    chunks_done: int = 0
    rows: int = 0  # rows written by the merges so far
    detail: str = ""
    seq: int = 0  # this request's state changes, in order
    updated_at: dt.datetime | None = None

    @staticmethod
    def new(table: str, lo: Any = None, hi: Any = None, reason: str = "requested") -> BackfillRequest:
        """A new pending request with a fresh id."""
        return BackfillRequest(uuid.uuid4().hex[:10], table, lo, hi, reason)

    def next(self, **changes) -> BackfillRequest:
        """This request's next state (``seq`` one higher)."""
        return replace(self, seq=self.seq + 1, updated_at=dt.datetime.now(dt.UTC), **changes)

    @property
    def active(self) -> bool:
        """Taken or waiting, neither paused nor finished."""
        return self.state in (BackfillState.PENDING, BackfillState.RUNNING)

    @property
    def whole_table(self) -> bool:
        return self.lo is None and self.hi is None

    def describe_range(self) -> str:
        if self.whole_table:
            return "all rows"
        return f"[{'-∞' if self.lo is None else self.lo}, {'∞' if self.hi is None else self.hi})"

    def progress(self) -> str:
        if not self.chunks:
            return str(self.state)
        return f"{self.state} {self.chunks_done}/{len(self.chunks)} chunks, {self.rows:,} rows"

    def to_row(self, pipeline: str) -> dict:
        return {"pipeline": pipeline, "id": self.id, "table": self.table,
                "lo": json.dumps(encode_value(self.lo)), "hi": json.dumps(encode_value(self.hi)),
                "reason": self.reason, "state": str(self.state),
                "plan": json.dumps([{"index": c.index, "key": c.key, "lo": encode_value(c.lo),
                                     "hi": encode_value(c.hi)} for c in self.chunks]),
                "chunks_done": self.chunks_done, "rows": self.rows, "detail": self.detail, "seq": self.seq,
                "updated_at": self.updated_at or dt.datetime.now(dt.UTC)}

    @staticmethod
    def from_row(r: dict) -> BackfillRequest:
        chunks = tuple(Chunk(r["table"], c["index"], c["key"], decode_value(c["lo"]), decode_value(c["hi"]))
                       for c in json.loads(r["plan"] or "[]"))
        return BackfillRequest(r["id"], r["table"], decode_value(json.loads(r["lo"])),
                               decode_value(json.loads(r["hi"])), r["reason"] or "", BackfillState(r["state"]),
                               chunks, r["chunks_done"] or 0, r["rows"] or 0, r["detail"] or "", r["seq"] or 0,
                               r["updated_at"])


def latest_requests(rows: Iterable[BackfillRequest]) -> list[BackfillRequest]:
    """Each request's current state: its latest row, except that a finished or cancelled
    request stays so (a late progress row of the stream cannot revive a cancelled one).
    Oldest request first."""
    by_id: dict[str, BackfillRequest] = {}
    first: dict[str, tuple] = {}
    for r in sorted(rows, key=lambda r: r.seq):
        first.setdefault(r.id, (r.updated_at or dt.datetime.min.replace(tzinfo=dt.UTC), r.id))
        cur = by_id.get(r.id)
        if cur is not None and cur.state.terminal:
            continue
        by_id[r.id] = r
    return sorted(by_id.values(), key=lambda r: first[r.id])


def key_value(col: Column, text: str) -> Any:
    """A key bound given on the command line, as the chunk key column's Python value."""
    try:
        return codec_for(col).key_from_text(col, text)
    except ValueError:
        raise BadInput(f"{text!r} is not a value of the chunk key column {col.name} ({col.column_type})") from None


def clip(chunks: Sequence[Chunk], first: int, last: int, lo: Any, hi: Any) -> list[Chunk]:
    """Chunks ``first..last`` of a plan (those holding ``lo`` and ``hi``), the first starting
    at ``lo`` and the last ending at ``hi`` (None: that side unbounded), renumbered from 0."""
    picked = list(chunks[first:last + 1])
    if not picked:
        return []
    if lo is not None:
        picked[0] = replace(picked[0], lo=lo)
    if hi is not None:
        picked[-1] = replace(picked[-1], hi=hi)
    return [replace(c, index=i) for i, c in enumerate(picked)]


@dataclass
class ChunkMerge:
    """The keys touched since a read group's start (see the module invariants), as the stream
    applies them: row-key tuples of the source's values."""

    touched: set[tuple] = field(default_factory=set)

    def keys(self, schema: pa.Schema) -> pa.Table:
        """The touched keys as a table of ``schema`` (the row key's columns, in order); built
        once per merge, so the stream's per-event cost stays a set update."""
        columns = list(zip(*self.touched)) or [()] * len(schema)
        return pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(columns, schema)], schema=schema)


@dataclass(frozen=True)
class Writes:
    """What one chunk's merge writes: indexes into the chunk's rows to append (Delta does not
    hold the key) and to upsert, the keys to delete, and the keys Delta holds more than once
    (left once before the merge)."""

    append: pa.Array
    upsert: pa.Array
    delete: pa.Table
    twice: pa.Table


_ROW, _HELD, _COUNT = "__binlake_row", "__binlake_held", "__binlake_count"  # helper columns of the joins


def merge_writes(chunk: pa.Table, key: Sequence[str], touched: pa.Table, held: pa.Table,
                 columns: Sequence[str] | None = None) -> Writes:
    """A chunk's merge decided in Arrow (the module invariants), every table keyed by the row
    key's columns ``key`` (same names and types):

    - ``chunk``: the chunk's rows (the key columns and ``columns``);
    - ``touched``: keys changed since the read group's start: never written;
    - ``held``: Delta's rows of the chunk's range (the candidates): with ``columns`` given,
      every row Delta holds there exactly as of the read, with those columns (*exact*);
      else only the key columns of Delta's keys there.

    Untouched candidates missing from the chunk are deleted. Untouched chunk rows are
    upserted; when exact, rows whose key Delta does not hold are appended instead, and rows
    Delta holds once with equal ``columns`` (NULL equals NULL; NaN equals nothing) are not
    written. Indexes come in the chunk's order.

    Exact rows that need no join are decided without one (the same writes,
    tests/test_backfill_parts.py): Delta holding none of the range (every untouched row is
    appended), or holding exactly the chunk's keys in the chunk's order (a range read again
    unchanged: row i is compared with Delta's row i)."""
    k = list(key)
    n = chunk.num_rows
    rows = chunk.select(k).append_column(_ROW, pa.array(np.arange(n, dtype=np.int64)))
    untouched = rows.join(touched.select(k), k, join_type="left anti") if touched.num_rows else rows
    if columns is not None and (held.num_rows == 0 or _aligned(chunk, held, k)):
        return _aligned_writes(chunk, held, k, untouched[_ROW], columns)
    counts = held.select(k).append_column(_HELD, pa.array(np.arange(held.num_rows, dtype=np.int64))) \
        .group_by(k).aggregate([(_HELD, "max"), (_HELD, "count")]) \
        .rename_columns({f"{_HELD}_max": _HELD, f"{_HELD}_count": _COUNT})  # held twice: any copy (upserted)
    twice = counts.filter(pc.greater(counts[_COUNT], 1)).select(k)
    delete = counts.select(k).join(rows.select(k), k, join_type="left anti") \
        .join(touched.select(k), k, join_type="left anti")
    if columns is None:
        return Writes(pa.array([], pa.int64()), _sorted(untouched[_ROW]), delete, twice)
    matched = untouched.join(counts, k, join_type="left outer")
    new = pc.is_null(matched[_HELD])
    append = matched.filter(new)[_ROW]
    found = matched.filter(pc.invert(new))
    mine = chunk.select(list(columns)).take(found[_ROW])
    theirs = held.select(list(columns)).take(found[_HELD])
    same = pc.less_equal(found[_COUNT], 1)
    for c in columns:
        same = pc.and_(same, _same(mine[c], theirs[c]))
    return Writes(_sorted(append), _sorted(found.filter(pc.invert(same))[_ROW]), delete, twice)


def _aligned(chunk: pa.Table, held: pa.Table, key: list[str]) -> bool:
    """Whether ``held`` holds exactly ``chunk``'s keys, row by row in the same order, each once
    (a one-column key, distinct in the chunk: a declared key could repeat)."""
    if len(key) != 1 or chunk.num_rows != held.num_rows:
        return False
    mine, theirs = chunk[key[0]], held[key[0]]
    return pc.all(pc.equal(mine, theirs)).as_py() is True and pc.count_distinct(mine).as_py() == chunk.num_rows


def _aligned_writes(chunk: pa.Table, held: pa.Table, key: list[str], untouched: pa.ChunkedArray,
                    columns: Sequence[str]) -> Writes:
    """:func:`merge_writes` of exact ``held`` rows that are none, or the chunk's keys in its
    order, each once (:func:`_aligned`): new rows appended, rows
    that differ from Delta's row at the same place upserted, nothing deleted."""
    none = held.select(key).slice(0, 0)
    if held.num_rows == 0:
        return Writes(_sorted(untouched), pa.array([], pa.int64()), none, none)
    same = pa.array(np.ones(chunk.num_rows, dtype=bool))
    for c in columns:
        same = pc.and_(same, _same(chunk[c], held[c]))
    differs = pc.invert(same).take(untouched)
    return Writes(pa.array([], pa.int64()), _sorted(untouched.filter(differs)), none, none)


def _sorted(indexes: pa.ChunkedArray) -> pa.Array:
    return indexes.combine_chunks().sort()


def _same(a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Row by row, whether ``a`` and ``b`` (of one type) hold equal values, NULL equal to NULL
    (NaN is unequal to everything, as in Python); a struct (geometry) field by field."""
    a, b = (x.combine_chunks() if isinstance(x, pa.ChunkedArray) else x for x in (a, b))
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    if pa.types.is_struct(a.type):
        equal = pc.and_(pc.is_valid(a), pc.is_valid(b))
        for x, y in zip(a.flatten(), b.flatten()):
            equal = pc.and_(equal, _same(x, y))
    else:
        equal = pc.fill_null(pc.equal(a, b), False)
    return pc.or_(both_null, equal)


def large(chunks: int, min_chunks: int) -> bool:
    """Whether a request of ``chunks`` chunks reads in groups, several chunks at once (``min_chunks`` > 0 of them
    or more; the whole plan counts, so a request whose first chunks were read one at a time while
    Spark started goes on in groups)."""
    return 0 < min_chunks <= chunks


def read_group_size(chunks: int, pending: int, slots: int | None, min_chunks: int, chunk_rows: int,
                    group_rows: int) -> int:
    """How many of the ``pending`` chunks left of a request of ``chunks`` (of ``chunk_rows``
    rows each, as planned) the next read group holds: one for a request that is not
    :func:`large`; else ``group_rows`` rows of chunks (at least one) per read slot (``slots``:
    the local runner's threads, or Spark's task slots), or for the one reader thread of the
    stream process while Spark is not up (None), at most ``pending``. A group's fixed cost (a
    commit, a scan of Delta's rows of its range, a Spark job) is so shared by as many rows
    whatever the chunk size."""
    if not large(chunks, min_chunks):
        return 1
    per_slot = max(1, group_rows // chunk_rows)
    return max(1, min(pending, per_slot * (slots or 1)))


# Rows and bytes of chunk rows (Arrow, in memory) one merge commit holds at most (the rows also
# at most ``backfill_group_rows``): the stream waits for a whole merge commit (deciding it, writing
# it), so its time stays bounded; wide rows commit in smaller groups. Most of a commit's fixed
# cost is shared from a few chunks on: 50,000 rows make 20 commits of a million rows.
MERGE_COMMIT_ROWS = 50_000
MERGE_COMMIT_BYTES = 128 << 20


def merge_group_size(rows: Sequence[int], nbytes: Sequence[int], max_rows: int,
                     max_bytes: int = MERGE_COMMIT_BYTES) -> int:
    """How many of a read group's next chunks (``rows`` and ``nbytes`` of each, in the plan's
    order) merge in one Delta commit: the longest run from the first holding at most
    ``max_rows`` rows and ``max_bytes`` bytes, and at least one chunk (a chunk larger than
    either bound commits alone)."""
    total_rows = total_bytes = 0
    for n, (r, b) in enumerate(zip(rows, nbytes)):
        total_rows, total_bytes = total_rows + r, total_bytes + b
        if n and (total_rows > max_rows or total_bytes > max_bytes):
            return n
    return len(rows)


def chunk_positions(values: Sequence[int] | np.ndarray, chunks: Sequence[Chunk]) -> np.ndarray:
    """For integer chunk-key ``values``, the place in ``chunks`` (consecutive chunks of a plan)
    of the chunk holding each one, -1 for a value outside them all."""
    v = np.asarray(values)
    places = np.searchsorted(np.array([c.lo for c in chunks[1:]], dtype=v.dtype), v, side="right")
    lo, hi = chunks[0].lo, chunks[-1].hi
    outside = np.zeros(len(v), dtype=bool)
    if lo is not None:
        outside |= v < lo
    if hi is not None:
        outside |= v >= hi
    return np.where(outside, -1, places)
