"""What one stream micro-batch committed to one Delta table: the typed record the stream
engine reports after each checkpoint (``StreamEngine(on_commit=...)``), from which the
Dagster code location records offsets as asset metadata.

Invariant (tests/test_dagster_stream.py): ``offset`` and ``delta_version`` are those of the
Delta commit itself (its transaction identifier version is ``offset.applied.seq()``),
so metadata built from a TableCommit always equals what the lake says.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc_core.offset.stream_offset import StreamOffset


@dataclass(frozen=True)
class RowsApplied:
    """Rows a Delta commit inserted, updated and deleted (Delta's own MERGE metrics)."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0


@dataclass(frozen=True)
class TableCommit:
    """One table's Delta commit in a micro-batch."""

    table: str  # the Delta table ("db.table"; a route's sink)
    sources: tuple[str, ...]  # the captured tables whose changes it holds (the table itself unless routed)
    offset: StreamOffset  # the offset the commit carries: applied position, GTID, binlog event time
    delta_version: int
    rows: RowsApplied

    @property
    def seq(self) -> int:
        """The ``_cdc_seq`` of the last applied change (the commit's Delta transaction version)."""
        return self.offset.applied.seq()
