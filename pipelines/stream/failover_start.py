"""Failover at start: the source now is another server than the checkpoint's (its
``@@server_id`` differs), so the checkpoint and every table's own offset ahead of it are
found again on it by GTID (cdc_core/offset/failover.py) before the stream reads anything.

Invariants (tests/test_failover.py):
- Nothing is written before every offset is translated: a lagging server, a purged
  transaction or an inexact translation leaves the lake as it was.
- Each table whose own committed offset is ahead of the checkpoint (committed before a
  crash, the checkpoint not yet) gets an empty Delta commit carrying its translated
  offset, so its changes are not applied again on the new server; then the translated
  checkpoint is written. A crash in between repeats the failover, which leaves offsets
  already on the new server as they are.
"""

from __future__ import annotations

import logging

from cdc_core.config import BinlakeConfig, captures
from cdc_core.offset.failover import FailoverError, choose_base, lag_problem, needed_gtid, transaction_spans, translate
from cdc_core.offset.gtid import server_gtids
from cdc_core.offset.position import master_position
from cdc_core.offset.startup import earliest_position
from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.source.connection import ConnectionSettings
from pipelines.lake.control_store import Checkpoint, ControlStore
from pipelines.lake.offsets import last_stream_offset, restamp
from pipelines.lake.tables import open_table, table_uri

log = logging.getLogger(__name__)


def source_server_id(cur) -> int:
    """The source server's own ``@@server_id``."""
    cur.execute("SELECT @@server_id")
    return int(cur.fetchone()[0])


def fail_over(cfg: BinlakeConfig, store: ControlStore, conn: ConnectionSettings, cur, cp: Checkpoint,
              server_id: int, sinks: list[str]) -> StreamOffset:
    """Translate the checkpoint and the offsets of ``sinks`` ahead of it to the server
    ``server_id`` (see the module invariants); the translated checkpoint, saved."""
    old = cp.offset
    ahead = {}
    for sink in sinks:
        dt = open_table(table_uri(cfg.sink.path, sink), cfg.sink.storage_options)
        off = last_stream_offset(dt, cfg.pipeline.name) if dt is not None else None
        if off is not None and off.server_id != server_id and off.applied > old.applied:
            ahead[sink] = (dt, off)
    offsets = [old, *(o for _, o in ahead.values())]
    wanted = {needed_gtid(o) for o in offsets}
    have = server_gtids(cur)
    for g in sorted(wanted):
        problem = lag_problem(g, have)
        if problem:
            raise FailoverError(problem)
    start = earliest_position(cur)
    base = choose_base([o.applied for o in offsets], start.file_number)
    start, end = start.at_base(base), master_position(cur, base)
    source = cfg.source
    spans = transaction_spans(conn, source.server_id + 1, start, end, wanted,
                              lambda db, t: captures(tuple(source.tables), tuple(source.exclude_tables), f"{db}.{t}"))
    checkpoint = translate(old, spans, server_id)
    moved = {sink: (dt, translate(o, spans, server_id)) for sink, (dt, o) in ahead.items()}
    for sink, (dt, off) in moved.items():
        restamp(dt, cfg.pipeline.name, off)
        log.info("failover: %s's own offset %s is %s on the new server", sink, ahead[sink][1].applied, off.applied)
    store.save_checkpoint(checkpoint, cp.state, cp.rows_applied)
    log.warning("failover: the source is now server %s (was %s); the checkpoint %s (GTID %s) is %s there",
                server_id, old.server_id, old.applied, needed_gtid(old), checkpoint.applied)
    return checkpoint
