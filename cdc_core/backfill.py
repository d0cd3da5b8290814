"""Online backfill: a table (or a key range of it) read again in chunks while the stream
runs, merged into the live stream so nothing the stream applied meanwhile is lost or
reverted (the algorithm of Netflix's DBLog and Debezium's incremental snapshots, with
binlog positions as watermarks: nothing is written to the source).

The request's chunks are read in order, a *read group* at a time, by the stream process
(the only writer of the pipeline, pipelines/stream/backfill.py): one chunk, or, for a
request of many chunks (``source.snapshot.backfill_spark_min_chunks``), a group of
``CHUNKS_PER_SLOT`` x Spark's task slots chunks read in parallel on Spark, or, until the
stream process's Spark is up, ``CHUNKS_PER_SLOT`` chunks read one after another in a
thread (:func:`read_group_size`); either way the stream goes on meanwhile:
  1. between two micro-batches: S := the stream's position; then, per chunk C of the group
     (in parallel on Spark): LW := binlog end; rows(C) := SELECT the rows of C (one statement: its
     read view lies between LW and HW); HW := binlog end;
  2. the stream goes on (also while Spark reads); every change of the table after S marks
     its row keys (before and after images) as *touched*;
  3. once the group's rows are known and the stream has applied every change up to a
     position P at or past H (the highest HW of the group) and nothing after it (the next
     record is past P, or a heartbeat at P), the batch is committed and then the group's
     next chunk C (in the plan's order) is merged in one Delta commit: the rows of rows(C)
     whose key was not touched are upserted and the *candidates* of C that are neither in
     rows(C) nor touched are deleted. The group's next chunks merge the same way, right
     after or, past a time slice, at the next records, so the stream's own commits go on
     between them.

Candidates are the row keys Delta held in the range at some instant after the backfill
started and at or before the group's S: for an integer chunk key, read at S by one range
filter over the group's whole range (split per chunk, :func:`chunk_positions`), with
every change up to S committed (so Delta's rows of the range as of S are known exactly,
and keys are touched from S on: then a key neither touched nor a candidate is not in
Delta, and is appended; a candidate's row that equals the chunk's is not written again);
otherwise when the backfill started (or resumed), each key's chunk found in the server's
order of the chunk key. A key Delta gained later was written by the stream, which
applies every change of the table from the backfill's start on, so its row is MySQL's
row (updates are applied as whole after-images, inserted when missing).

Invariants (tests/test_backfill_parts.py, tests/test_backfill.py):
- After C's merge at P, C's range in Delta equals C's range in MySQL as of P, for any P
  at or past C's HW: S <= LW, so an untouched key had no change in (LW, P] and has the
  same row at the SELECT and at P (so rows(C)'s row, or its absence, is right), a
  touched key's last change up to P was applied by the stream, and a key the stream
  never wrote is a candidate. So a group's chunks, whose HWs differ, all merge past the
  highest, one by one wherever the stream then is (in the plan's order: progress stays a
  count of chunks merged), and a group Spark returns after the stream went past H merges
  where the stream is then.
- Nothing the stream applied is reverted: a key changed after S is touched (and never
  written by the merge); a change after P is applied after the merge.
- A merge is correct wherever it happens at or past its HW, so it may be repeated: a
  crash between a merge and its progress record reads the chunk again (new watermarks)
  and merges it again; chunks read but not merged (a whole group, or the rest of one)
  are simply read again. Progress is recorded after a group's last merge commit (each
  of its merges at least once; never marked done before it is; one control-table write
  per group, not per chunk).
- At most one group is in flight; a paused or cancelled request's group is dropped
  unmerged.
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
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from cdc_core.chunking import INTEGER_TYPES, Chunk, decode_value, encode_value
from cdc_core.errors import BadInput
from cdc_core.table_schema import Column

# Chunks of a read group per Spark task slot: every slot stays busy, and a step's fixed cost
# (a commit and one scan of Delta's rows of the group's range) is shared by more chunks.
CHUNKS_PER_SLOT = 2


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
    t = col.data_type
    try:
        if t in INTEGER_TYPES:
            return int(text)
        if t == "decimal":
            return Decimal(text)
        if t == "date":
            return dt.date.fromisoformat(text)
        if t in ("datetime", "timestamp"):
            return dt.datetime.fromisoformat(text)
    except ValueError:
        raise BadInput(f"{text!r} is not a value of the chunk key column {col.name} ({col.column_type})") from None
    if t in ("binary", "varbinary"):
        return text.encode()
    return text


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
    """What one chunk's merge writes: decided from the chunk's rows (by row key), the keys
    touched between its watermarks and its candidates (see the module invariants)."""

    touched: set[tuple] = field(default_factory=set)

    def decide(self, chunk_keys: Sequence[tuple], candidates: Iterable[tuple]) -> tuple[list[int], list[tuple]]:
        """Indexes of the chunk rows to upsert, and the keys to delete."""
        touched = self.touched
        upsert = [i for i, k in enumerate(chunk_keys) if k not in touched]
        present = set(chunk_keys)
        delete = [k for k in candidates if k not in present and k not in touched]
        return upsert, delete


def split_writes(chunk_keys: Sequence[tuple], chunk_values: Sequence[tuple], writes: Sequence[int],
                 delta_rows: dict[tuple, tuple], twice: Iterable[tuple] = ()) -> tuple[list[int], list[int]]:
    """With ``delta_rows``, Delta's rows of the range exactly as of the chunk's read (by key),
    the rows ``writes`` (indexes into the chunk) split into those to append (Delta does not
    hold the key) and those to upsert (Delta's row differs, or Delta holds the key twice);
    a row Delta already holds as it is is not written again."""
    twice = set(twice)
    append, upsert = [], []
    for i in writes:
        k = chunk_keys[i]
        held = delta_rows.get(k)
        if held is None:
            append.append(i)
        elif k in twice or held != chunk_values[i]:
            upsert.append(i)
    return append, upsert


def large(chunks: int, min_chunks: int) -> bool:
    """Whether a request of ``chunks`` chunks reads in groups on Spark (``min_chunks`` > 0 of them
    or more; the whole plan counts, so a request whose first chunks were read one at a time while
    Spark started goes on in groups)."""
    return 0 < min_chunks <= chunks


def read_group_size(chunks: int, pending: int, slots: int | None, min_chunks: int) -> int:
    """How many of the ``pending`` chunks left of a request of ``chunks`` the next read group
    holds: one for a request that is not :func:`large`; else ``CHUNKS_PER_SLOT`` per task slot
    of Spark's (``slots``), or for the one reader thread of the stream process while Spark is
    not up (None), at most ``pending``."""
    if not large(chunks, min_chunks):
        return 1
    return max(1, min(pending, CHUNKS_PER_SLOT * (slots or 1)))


def chunk_positions(values: Sequence[int], chunks: Sequence[Chunk]) -> list[int]:
    """For integer chunk-key ``values``, the place in ``chunks`` (consecutive chunks of a plan)
    of the chunk holding each one, -1 for a value outside them all."""
    bounds = [c.lo for c in chunks[1:]]
    lo, hi = chunks[0].lo, chunks[-1].hi
    return [-1 if (lo is not None and v < lo) or (hi is not None and v >= hi) else bisect_right(bounds, v)
            for v in values]
