"""Hand-off from the snapshot to the binlog stream.

The stream starts at the lowest chunk low watermark. A change on key k at
position p is already reflected in Delta when p is at or before the high
watermark of k's chunk: it is dropped. Past the highest high watermark nothing
is filtered.

Invariants (tested in tests/test_handoff.py and tests/test_snapshot_concurrent.py):
- ``chunk_for`` finds the chunk whose half-open range holds a key by binary search
  over the chunk lower bounds: O(log chunks).
- ``should_drop(k, p)`` is true iff ``p <= HW(chunk_for(k))``; applying every
  change that is not dropped, in binlog order, on top of the snapshot gives the
  table as of the end of the replayed range.
- The lookup compares keys in Python, so it is exact for keys whose Python order
  is the server's order (integers, decimals, dates and times, binary strings).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from cdc_core.chunking import Chunk
from cdc_core.positions import BinlogPosition


class HandoffFilter:
    """Per-key filter over one table's completed chunks."""

    def __init__(self, chunks: Sequence[Chunk], high_watermarks: dict[int, BinlogPosition]):
        self.chunks = sorted(chunks, key=lambda c: c.index)
        missing = [c.index for c in self.chunks if c.index not in high_watermarks]
        if missing:
            raise ValueError(f"chunks {missing} have no high watermark: the snapshot is not complete")
        self._lows = [c.lo for c in self.chunks[1:]]
        self._hws = [high_watermarks[c.index] for c in self.chunks]
        self.max_high_watermark = max(self._hws)

    def chunk_for(self, key) -> Chunk:
        """The chunk whose range holds ``key``."""
        return self.chunks[bisect_right(self._lows, key)]

    def should_drop(self, key, position: BinlogPosition) -> bool:
        """Whether a change on ``key`` at ``position`` is already in the snapshot."""
        if position > self.max_high_watermark:
            return False
        return position <= self._hws[bisect_right(self._lows, key)]
