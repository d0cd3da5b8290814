"""``binlake status``: per table phase, rows, committed position and lag, read from the
lake (Delta tables and ``_binlake/``) and, when reachable, the source server."""

from __future__ import annotations

import datetime as dt
import time

from cdc_core.config import BinlakeConfig
from cdc_core.offset.gtid import server_gtids
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.offset.startup import binlog_files, lag_bytes
from cdc_core.routes import Router
from cdc_core.schema.history import TableState, fold
from cdc_core.source.connection import captured_tables, connect, connection_settings
from pipelines.lake.control_store import ControlStore
from pipelines.lake.offsets import applied_position_key
from pipelines.lake.reads import count_rows
from pipelines.lake.tables import open_table, table_uri
from pipelines.schema.registry import pending_changes


def _file_name(number: int, like: str | None) -> str:
    """A binlog file name from its number, with the server's base name."""
    base = like.rsplit(".", 1)[0] if like else "binlog"
    return f"{base}.{number:06d}"


def _position_name(key: tuple[int, int], base: int, like: str | None) -> str:
    """The position of ``key`` on the source whose positions carry ``base`` (subtracted)."""
    return f"{_file_name(key[0] - base, like)}:{key[1]}"


def _left(state: TableState) -> bool:
    """Whether a table's last schema-history entry is the DROP or RENAME that took it out of the capture
    (not a RENAME that brought it in, which needs a backfill)."""
    last = state.history[-1] if state.history else None
    return (last is not None and not state.streamed and last.kind in ("drop_table", "rename_table")
            and not last.needs_backfill)


def _reconcile_summary(r: dict | None) -> dict | None:
    """A table's latest ``binlake reconcile`` result (``_binlake/reconcile_runs``), or None."""
    if r is None:
        return None

    def position(file, pos):
        return str(BinlogPosition(file, pos)) if file else None

    return {"at": r["started_at"].isoformat(), "equal": r["equal"], "chunks_checked": r["chunks_checked"],
            "mismatched_chunks": r["mismatched_chunks"], "mismatches": r["mismatches"],
            "excluded_columns": r["excluded_columns"], "mysql_rows": r["mysql_rows"], "delta_rows": r["delta_rows"],
            "server_position": position(r["server_file"], r["server_pos"]),
            "stream_position": position(r["stream_file"], r["stream_pos"]), "seconds": r["seconds"]}


def pipeline_status(cfg: BinlakeConfig) -> dict:
    """The status of every captured table and of the stream (JSON-ready). Each table names
    its ``sink`` (the Delta table it is written to: itself, or its route's sink); a routed
    table's rows are its own rows in the sink, its position the sink's committed position."""
    router = Router(cfg.routes)
    store = ControlStore.of(cfg)
    cp = store.checkpoint()
    plans = store.load_plans()
    names, files, end, gtids, source_error = [], None, None, None, None
    base = cp.offset.applied.base if cp else 0  # of the positions on the source now (a failover's)
    try:
        with connect(connection_settings(cfg), connect_timeout=5) as conn, conn.cursor() as cur:
            names = captured_tables(cfg, cur)
            files = binlog_files(cur)
            end = master_position(cur, base)
            gtids = str(server_gtids(cur))
    except Exception as e:  # noqa: BLE001 - status still shows the lake's side
        source_error = f"{type(e).__name__}: {e.args[-1] if e.args else e}"
    history = store.schema_history()
    last = max((e.position for e in history), default=None)
    folded = {n: fold(n, history, last) for n in {e.table for e in history}}
    backfill = {n for n, state in folded.items() if state.needs_backfill}
    left = {n: state.history[-1] for n, state in folded.items() if _left(state)}
    held = {p.table: p for p in pending_changes(store, history)}
    requests = store.backfills()
    backfilling: dict = {}
    for r in requests:  # the oldest open request of each table
        if not r.state.terminal:
            backfilling.setdefault(r.table, r)
    names = sorted(set(names) | set(plans))
    reconciled = store.latest_reconcile()
    now = time.time()

    def lag(applied_key: tuple[int, int] | None, event_time: int) -> tuple[float | None, int | None]:
        if files is None or applied_key is None:
            return None, None
        applied = BinlogPosition(_file_name(applied_key[0] - base, end.file if end else None), applied_key[1])
        nbytes = lag_bytes(files, applied)
        return (0.0 if nbytes == 0 else max(0.0, now - event_time) if event_time else None), nbytes

    tables = []
    for n in names:
        sink = router.sink(n)
        t = open_table(table_uri(cfg.sink.path, sink), cfg.sink.storage_options)
        rows = count_rows(t, n if router.routed(n) else None) if t is not None else 0
        key = applied_position_key(t, cfg.pipeline.name) if t is not None else None
        plan = plans.get(n, [])
        done = store.completed_chunks(n, t) if plan else {}
        if n in held:
            phase = f"held: schema change pending since {held[n].position} ({held[n].description})"
        elif n in backfilling:
            r = backfilling[n]
            phase = f"backfill {r.progress()} ({r.describe_range()})"
        elif n in backfill:
            phase = "needs backfill" + (" (not streamed)" if key is None else "")
        elif n in left:  # dropped or renamed away: nothing more is streamed into its Delta table
            phase = f"not captured since {left[n].position} ({left[n].description}); Delta table kept"
        elif key is not None or (cp is not None and (not plan or len(done) == len(plan))):
            phase = f"streaming ({cp.state})" if cp else "streaming"
            if cp is not None:  # the checkpoint is at or past every table's own commit
                key = max(k for k in (key, cp.offset.applied.key) if k is not None)
        elif plan and len(done) < len(plan):
            phase = f"snapshot {len(done)}/{len(plan)} chunks"
        elif plan:
            phase = "snapshot done"
            key = max((r.high_watermark.key for r in done.values()), default=None)
        else:
            phase = "not started"
        lag_s, lag_b = lag(key, cp.offset.event_time if cp else 0)
        tables.append({"table": n, "sink": sink, "phase": phase, "rows": rows,
                       "committed_position": _position_name(key, base, end.file if end else None) if key else None,
                       "lag_seconds": lag_s, "lag_bytes": lag_b, "reconcile": _reconcile_summary(reconciled.get(n))})
    stream = {"state": cp.state if cp else "not started",
              "committed_position": str(cp.offset.applied) if cp else None,
              "resume_position": str(cp.offset.resume) if cp else None,
              "gtid": cp.offset.gtid if cp else None,
              "server_id": cp.offset.server_id if cp else None,
              "checkpoint_at": cp.committed_at.isoformat() if cp else None,
              "source_end": str(end) if end else None,
              "source_gtids": gtids}
    key = cp.offset.applied.key if cp else None
    stream["lag_seconds"], stream["lag_bytes"] = lag(key, cp.offset.event_time if cp else 0)
    backfills = [{"id": r.id, "table": r.table, "range": r.describe_range(), "reason": r.reason,
                  "state": str(r.state), "chunks": len(r.chunks), "chunks_done": r.chunks_done, "rows": r.rows,
                  "detail": r.detail, "updated_at": r.updated_at.isoformat() if r.updated_at else None}
                 for r in requests]
    return {"pipeline": cfg.pipeline.name, "stream": stream, "tables": tables, "backfills": backfills,
            "source_error": source_error, "at": dt.datetime.now(dt.UTC).isoformat()}

