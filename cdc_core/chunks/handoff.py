"""Hand-off from the snapshot to the binlog stream.

The stream starts at the lowest chunk low watermark. A change on key k at
position p is already reflected in Delta when p is at or before the high
watermark of k's chunk: it is dropped. Past the highest high watermark nothing
is filtered.

Which chunk holds k is decided in the server's order of the chunk key
(cdc_core/types/key_order.py), the order the chunks were planned and read in: Python
order of the codecs' sort keys for keys without a collation (integers, decimals, dates
and times, binary strings, BIT, INET4/INET6 and UUID as stored) and for ENUM and SET
(by member index and bits), the column collation's sort keys for string keys (case,
accents, expansions such as ß = ss, PAD SPACE vs NO PAD), or, for a collation whose sort
keys do not model its comparisons, the server's own comparisons. A composite
key is chunked on its leading column, so only that column is looked up. A table read
as one chunk (no chunk key: cdc_core/chunks/planning.py) needs no key at all.

Invariants (tested in tests/test_handoff.py, tests/test_handoff_collations.py and
tests/test_snapshot_concurrent.py):
- ``chunk_for(k)`` is the chunk whose half-open range holds k as the server
  compares (``lo <= k < hi`` in the key's collation), found by binary search over
  the chunk lower bounds: O(log chunks).
- ``should_drop(k, p)`` is true iff ``p <= HW(chunk_for(k))``; applying every
  change that is not dropped, in binlog order, on top of the snapshot gives the
  table as of the end of the replayed range.
- ``drops(keys, p)`` answers a whole row event's images at once with at most one
  server query (none when p is at or before the lowest high watermark, past the
  highest, or when every key is cached or has no collation); answers are cached
  per key value (bounded), so ``should_drop`` on an image of that event asks nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

from cdc_core.chunks.planning import Chunk
from cdc_core.offset.position import BinlogPosition
from cdc_core.schema.table import TableSchema
from cdc_core.types.key_order import KeyOrder, KeyOrders, Partition, PythonOrder
from cdc_core.types.mapping import binlog_value

CACHE_KEYS = 100_000  # chunk indexes remembered per table (key values of recent events)


class HandoffFilter:
    """Per-key filter over one table's completed chunks."""

    def __init__(self, chunks: Sequence[Chunk], high_watermarks: dict[int, BinlogPosition],
                 order: KeyOrder | None = None):
        self.chunks = sorted(chunks, key=lambda c: c.index)
        missing = [c.index for c in self.chunks if c.index not in high_watermarks]
        if missing:
            raise ValueError(f"chunks {missing} have no high watermark: the snapshot is not complete")
        self.key = self.chunks[0].key
        self._order = order or PythonOrder()
        self._hws = [high_watermarks[c.index] for c in self.chunks]
        self.max_high_watermark = max(self._hws)
        self.min_high_watermark = min(self._hws)
        self._cache: dict[object, int] = {}

    @classmethod
    def for_table(cls, schema: TableSchema, chunks: Sequence[Chunk], high_watermarks: dict[int, BinlogPosition],
                  orders: KeyOrders) -> HandoffFilter:
        """The filter of ``schema``'s table, its chunk key ordered as the server orders it."""
        if len(chunks) == 1:  # every key is in the one chunk (which may have no key)
            return cls(chunks, high_watermarks)
        return cls(chunks, high_watermarks, orders.for_column(schema.column(chunks[0].key)))

    @cached_property
    def _partition(self) -> Partition:
        # Made on first use: a stream restarted past the hand-off never fetches the bounds' sort keys.
        return self._order.partition([c.lo for c in self.chunks[1:]])

    def _locate(self, keys: Sequence[object]) -> list[int]:
        if len(self.chunks) == 1:
            return [0] * len(keys)
        if not self._partition.remote:
            return self._partition.locate(keys)
        cache = self._cache
        missing = [k for k in dict.fromkeys(keys) if k not in cache]
        if missing:
            if len(cache) + len(missing) > CACHE_KEYS:
                cache.clear()
            cache.update(zip(missing, self._partition.locate(missing)))
        return [cache[k] for k in keys]

    def chunk_for(self, key) -> Chunk:
        """The chunk whose range holds ``key``."""
        return self.chunks[self._locate([key])[0]]

    def drops(self, keys: Sequence[object], position: BinlogPosition) -> list[bool]:
        """For each chunk-key value of one row event at ``position`` (canonical values, as
        :func:`binlog_value` gives them), whether its change is already in the snapshot."""
        if position > self.max_high_watermark:
            return [False] * len(keys)
        if position <= self.min_high_watermark:  # before every chunk's HW: whatever the chunk
            return [True] * len(keys)
        return [position <= self._hws[i] for i in self._locate(keys)]

    def should_drop(self, key, position: BinlogPosition) -> bool:
        """Whether a change on ``key`` at ``position`` is already in the snapshot."""
        return self.drops([key], position)[0]


    def place_event(self, schema: TableSchema, op: str, rows: Sequence, position: BinlogPosition) -> None:
        """Place a whole row event's keys in their chunks at once (at most one server query), so
        ``should_drop`` on each of its images asks nothing. ``rows`` are value tuples in
        ``schema``'s column order (an update's are (before, after) pairs). Events outside the
        hand-off window need no placing, and their keys are not even read."""
        if not self.min_high_watermark < position <= self.max_high_watermark:
            return
        names = [c.name for c in schema.columns]
        if len(self.chunks) == 1 or self.key not in names:
            return
        i, col = names.index(self.key), schema.column(self.key)
        images = [img for pair in rows for img in pair] if op == "u" else rows
        self.drops([binlog_value(col, img[i]) for img in images], position)
