"""The stream's offset in each Delta table, committed atomically with the data it applied
(docs/contracts.md, "Delta tables"): a Delta transaction identifier
``binlake-stream:<pipeline>`` whose version is the applied position's ``_cdc_seq``, and the
whole offset in the commit metadata (``binlake.stream.offset``); read back by a restart's
skip filter, ``binlake status``, the schema registry and a failover.

Invariants:
- Every stream commit (data, a schema change, a truncate, a commit without data) carries
  the offset it reaches, so a table's own offset is exact even when the pipeline
  checkpoint is older (tests/test_stream_crash.py).
- A failover re-stamps a table ahead of the checkpoint with one commit without data
  carrying its offset translated to the new server (:func:`restamp`; tests/test_failover.py).
"""

from __future__ import annotations

from deltalake import CommitProperties, DeltaTable, Transaction

from cdc_core.offset.stream_offset import OFFSET_KEY, StreamOffset, app_id, position_key_of_version
from pipelines.lake.tables import commit_no_data

# A stream commit's binlog row changes per source table and op, {"db.t": {"c": n, "u": n, "d": n}}:
# those of its range that the batch folded in, applied or already in the snapshot (docs/contracts.md).
CHANGES_KEY = "binlake.stream.changes"


def stream_commit_properties(pipeline: str, offset: StreamOffset, extra: dict[str, str] | None = None
                             ) -> CommitProperties:
    """A stream commit's offset, atomic with its data: a Delta transaction identifier
    (version = the applied position's seq) and the offset in the commit metadata (with
    ``extra`` metadata, e.g. the backfill chunk a merge carries)."""
    return CommitProperties(custom_metadata={OFFSET_KEY: offset.to_json(), **(extra or {})},
                            app_transactions=[Transaction(app_id(pipeline), offset.applied.seq())])


def applied_position_key(dt: DeltaTable, pipeline: str) -> tuple[int, int] | None:
    """(file number, offset) of the last binlog event the stream applied to ``dt``, or None."""
    version = dt.transaction_version(app_id(pipeline))
    return None if version is None else position_key_of_version(version)


def last_stream_offset(dt: DeltaTable, pipeline: str) -> StreamOffset | None:
    """The offset of the commit that set ``dt``'s stream transaction version (its own last
    applied position), or None if the stream never committed to it."""
    version = dt.transaction_version(app_id(pipeline))
    if version is None:
        return None
    for commit in dt.history():  # newest first
        text = commit.get(OFFSET_KEY)
        if text:
            offset = StreamOffset.from_json(text)
            if offset.applied.seq() == version:
                return offset
    return None


def restamp(dt: DeltaTable, pipeline: str, offset: StreamOffset) -> None:
    """Commit no data, only ``offset`` as ``dt``'s own stream offset (a failover's translation)."""
    commit_no_data(dt, stream_commit_properties(pipeline, offset))
