"""Resync: the way out when the stream's resume position is gone from the server (its
binlog was purged while the stream was stopped), without dropping the lake.

The stream restarts at the server's binlog end, and every captured table is backfilled
online (cdc_core/chunks/incremental.py): each chunk is read between watermarks and merged at its
high watermark, so every table ends equal to MySQL while the stream applies the changes
after the new start. Nothing is deleted: tables keep their Delta history, and a DDL that
ran in the lost range is found where the live schemas are checked (pipelines/stream/start.py).

Invariants (tests/test_stream_crash.py: test_purged_position_then_resync):
- Only a checkpoint whose resume position the server no longer has is resynced; any other
  is refused (the stream resumes there as usual, losing nothing).
- Every captured table is backfilled; one that cannot be backfilled online (no row key,
  routed) refuses the resync before anything is written, naming it and what to do.
- The backfill requests are stored before the checkpoint moves: a crash in between leaves
  the purged checkpoint (resync again; a request repeated is harmless, as a backfill is).
"""

from __future__ import annotations

import logging

from cdc_core.chunks.incremental import BackfillRequest
from cdc_core.config import BinlakeConfig
from cdc_core.errors import BadInput
from cdc_core.offset.position import master_position
from cdc_core.offset.startup import PositionPurged, check_available
from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.source.connection import captured_tables, connect, connection_settings, describe_captured
from pipelines.backfill.requests import refusal, request_ranges
from pipelines.lake.control_store import ControlStore
from pipelines.stream.failover_start import source_server_id

log = logging.getLogger(__name__)


def resync(cfg: BinlakeConfig) -> tuple[StreamOffset, list[BackfillRequest]]:
    """Move the purged checkpoint to the server's binlog end and request a backfill of every
    captured table (see the module invariants); the new checkpoint and the requests."""
    store = ControlStore.of(cfg)
    cp = store.checkpoint()
    if cp is None:
        raise BadInput("nothing to resync: the stream has no checkpoint yet (run `binlake run` or `binlake stream`)")
    with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
        try:
            check_available(cur, cp.offset.resume)
        except PositionPurged:
            pass
        else:
            raise BadInput(f"nothing to resync: the server still has the stream's position {cp.offset.resume}; "
                           "`binlake stream` resumes there and loses nothing")
        names = captured_tables(cfg, cur)
        schemas = describe_captured(cur, names, cfg.source)
        problems = [p for p in (refusal(cfg, n, schemas.get(n), described=True) for n in names) if p]
        if problems:
            raise BadInput("cannot resync: " + "; ".join(problems))
        end = master_position(cur, cp.offset.applied.base)
        server_id = source_server_id(cur)
    requests = [r for n in names for r in request_ranges(cfg, n, [(None, None)], reason="resync")]
    offset = StreamOffset(end, end, server_id=server_id)
    store.save_checkpoint(offset, cp.state, cp.rows_applied)
    log.warning("resync: the stream's position %s was purged; it restarts at %s and backfills %d tables",
                cp.offset.resume, end, len(names))
    return offset, requests
