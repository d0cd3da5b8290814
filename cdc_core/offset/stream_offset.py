"""Stream offsets: where a restart resumes and what it must not apply again.

An offset is recorded at the end of every micro-batch, in two places:
- each table's Delta commit carries, atomically with its data, the position of the
  last binlog event it applied (a Delta transaction identifier whose version is
  ``applied.seq()``, plus the offset in the commit metadata);
- the pipeline checkpoint in ``_binlake/stream_checkpoint`` records, once every
  table of the batch is committed, ``resume`` and ``applied``.

Invariants (tested in tests/test_table_batch.py):
- ``resume <= applied``; ``resume`` is a transaction boundary (the start of the
  transaction holding ``applied``, or ``applied`` itself when that transaction
  ended), so a restart reads every table map it needs.
- A row event at position p is applied on restart iff ``p > checkpoint.applied``
  and ``p > applied(table)``: a crash after some tables committed but before the
  checkpoint neither loses nor repeats a change.
- Positions inside a transaction are exact: row events have distinct end
  positions, and a batch never splits one row event.
- An offset names its place by GTID too, so another server can find it (failover,
  cdc_core/offset/failover.py): ``gtid`` is the transaction that ends at ``resume``;
  ``txn_gtid`` and ``txn_rows`` the transaction holding ``applied`` and how many of its
  captured rows are at or before ``applied`` (None and 0 when ``applied == resume``);
  ``server_id`` the server whose binlog ``resume`` and ``applied`` are positions of.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from cdc_core.offset.position import BinlogPosition

OFFSET_KEY = "binlake.stream.offset"


def app_id(pipeline: str) -> str:
    """Delta transaction identifier of a pipeline's stream commits."""
    return f"binlake-stream:{pipeline}"


def position_key_of_version(version: int) -> tuple[int, int]:
    """(file number, offset) of a position from its ``seq()`` (a Delta transaction version)."""
    return version >> 44, (version >> 12) & 0xFFFFFFFF


@dataclass(frozen=True)
class StreamOffset:
    """Resume point and last applied event of the stream."""

    resume: BinlogPosition
    applied: BinlogPosition
    gtid: str | None = None
    event_time: int = 0  # binlog timestamp (s) of the last applied event; 0 if unknown
    server_id: int | None = None  # the source's @@server_id (None: written by an older binlake)
    txn_gtid: str | None = None
    txn_rows: int = 0

    def __post_init__(self):
        if self.applied < self.resume:
            raise ValueError(f"offset resumes at {self.resume} after its applied position {self.applied}")

    @property
    def inside_transaction(self) -> bool:
        """Whether ``applied`` is inside a transaction (some of its rows applied, not all)."""
        return self.txn_rows > 0

    def to_json(self) -> str:
        return json.dumps({"resume": self.resume.to_dict(), "applied": self.applied.to_dict(), "gtid": self.gtid,
                           "event_time": self.event_time, "server_id": self.server_id, "txn_gtid": self.txn_gtid,
                           "txn_rows": self.txn_rows})

    @classmethod
    def from_json(cls, text: str) -> StreamOffset:
        d = json.loads(text)
        return cls(BinlogPosition.from_dict(d["resume"]), BinlogPosition.from_dict(d["applied"]), d.get("gtid"),
                   int(d.get("event_time") or 0), d.get("server_id"), d.get("txn_gtid"), int(d.get("txn_rows") or 0))


class SkipFilter:
    """Which row events a restarted stream must not apply again (see the invariants)."""

    def __init__(self, checkpoint: BinlogPosition | None, per_table: dict[str, tuple[int, int]]):
        self.checkpoint = checkpoint
        self.per_table = per_table  # "db.table" -> (file number, offset) of its last applied event

    def applied(self, table: str, pos: BinlogPosition) -> bool:
        """Whether the row event ending at ``pos`` on ``table`` is already in Delta."""
        if self.checkpoint is not None and pos <= self.checkpoint:
            return True
        done = self.per_table.get(table)
        return done is not None and pos.key <= done
