"""The record of one completed snapshot chunk: what was read and between which watermarks.

A record is stored in two places (docs/contracts.md): the Delta commit that holds the
chunk's rows carries it in its metadata (``binlake.snapshot.chunks``, a JSON list of
``to_json_row()``), and the ``snapshot_chunks`` control table mirrors it (``to_row()``).
``from_row`` reads both, also records written by older binlake versions.

Invariant (tests/test_chunk_record.py): ``from_row`` of either form gives the record back,
and the JSON form is the one binlake always wrote (same keys, same order; ``delta_version``
null, as the commit carrying it is not made yet; ``completed_at`` ISO 8601 text), plus
``base`` for watermarks read after a failover (cdc_core/offset/position.py).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cdc_core.chunks.planning import Chunk
from cdc_core.offset.position import BinlogPosition


@dataclass(frozen=True)
class ChunkRecord:
    """Chunk ``chunk_index`` of ``table``: its ``rows`` (None: unknown, a chunk read in a
    group on a non-integer key), read between ``low_watermark`` and ``high_watermark`` with
    ``window_changes`` changes replayed, committed in Delta version ``delta_version`` (None
    until that commit is made)."""

    table: str
    chunk_index: int
    rows: int | None
    low_watermark: BinlogPosition
    high_watermark: BinlogPosition
    window_changes: int
    delta_version: int | None
    completed_at: dt.datetime | None
    pipeline: str | None  # None: a record without one (never this pipeline's)

    @staticmethod
    def for_chunk(pipeline: str, chunk: Chunk, rows: int | None, low: BinlogPosition, high: BinlogPosition,
             window_changes: int) -> ChunkRecord:
        """The record of ``chunk`` just read (its commit not made yet)."""
        return ChunkRecord(chunk.table, chunk.index, rows, low, high, window_changes, None,
                           dt.datetime.now(dt.UTC), pipeline)

    def to_row(self) -> dict:
        """The ``snapshot_chunks`` row (columns: ``CHUNKS_SCHEMA``)."""
        return {"pipeline": self.pipeline, "table": self.table, "chunk_index": self.chunk_index, "rows": self.rows,
                "lw_file": self.low_watermark.file, "lw_pos": self.low_watermark.pos,
                "hw_file": self.high_watermark.file, "hw_pos": self.high_watermark.pos,
                "window_changes": self.window_changes, "delta_version": self.delta_version,
                "completed_at": self.completed_at, "base": self.low_watermark.base}

    def to_json_row(self) -> dict:
        """The JSON object carried in commit metadata (``binlake.snapshot.chunks``)."""
        row = {**self.to_row(), "completed_at": self.completed_at.isoformat() if self.completed_at else None}
        if not row["base"]:  # only after a failover: the form binlake always wrote otherwise
            del row["base"]
        return row

    @staticmethod
    def from_row(r: dict) -> ChunkRecord:
        """A record from a ``snapshot_chunks`` row or a commit-metadata object (a key it
        lacks reads as unknown: no pipeline, rows or window changes, an empty position)."""
        completed = r.get("completed_at")
        return ChunkRecord(
            r["table"], r["chunk_index"], r.get("rows"),
            BinlogPosition(r.get("lw_file") or "", r.get("lw_pos") or 0, r.get("base") or 0),
            BinlogPosition(r.get("hw_file") or "", r.get("hw_pos") or 0, r.get("base") or 0),
            r.get("window_changes") or 0, r.get("delta_version"),
            dt.datetime.fromisoformat(completed) if isinstance(completed, str) else completed,
            r.get("pipeline"))
