"""Start resolution: where the stream starts reading, what is applied already, where it
stops, and what it knows of every captured table before the first event.

Invariants (tests/test_stream.py, tests/test_schema_at_position.py):
- With a checkpoint, reading resumes at its ``resume`` position and nothing at or
  before its ``applied`` position is applied again (cdc_core/offset/stream_offset.py). Without one,
  the startup mode decides (cdc_core/offset/startup.py); ``initial``/``snapshot`` start at the
  lowest chunk low watermark with the hand-off filters of every snapshotted table.
- A table's schema at the start is the schema history's at that position
  (cdc_core/schema/history.py: fold), never the live table's: a DDL that ran after the
  start position is read from the binlog like any other event. The live schema is a
  baseline only where it is the schema at the start: on the first start in mode
  ``latest`` (described with the binlog end unchanged around it), or for a table
  snapshotted by a binlake that recorded no baselines.
- A captured table the history does not know is *undecided*: if the stream reads its
  CREATE TABLE it is captured from creation; if it reads a row of it first, or passes
  ``decide_at`` (the binlog end at start) without either, it existed before with rows
  Delta does not have, and it is recorded as needing a backfill — never half-captured.
  On a first start from a past position (``earliest``, ``specific``, ``timestamp``) a
  table's schema is taken from its first table map instead (Delta starts empty there).
- A checkpoint written on another server (its ``server_id`` is not the source's) is
  found on the source by GTID before anything else (pipelines/stream/failover_start.py); every
  position of the plan then carries the checkpoint's base (cdc_core/offset/position.py).
- The live schemas are described at ``live_at``, a binlog position with no DDL on the
  captured tables around the description. When the stream reaches it, each streamed
  table's schema there (the history plus every DDL read since) must be the live one; a
  difference is a change binlake never read (a DDL run with ``sql_log_bin=0`` while it
  was stopped): the table diverged, and it is backfilled (pipelines/stream/schema_operator.py).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from cdc_core.binlog.range_reads import read_statements
from cdc_core.chunks.handoff import HandoffFilter
from cdc_core.config import BinlakeConfig, SourceConfig
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.offset.startup import StartupError, earliest_position, scan_for_start
from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.schema.history import HistoryEntry, Status, TableState, fold
from cdc_core.schema.statements import parse_statement
from cdc_core.schema.table import TableSchema
from cdc_core.source.capture import without_excluded
from cdc_core.source.connection import ConnectionSettings, captured_tables, describe_captured
from cdc_core.types.key_order import KeyOrders
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import open_table, table_uri
from pipelines.stream.failover_start import fail_over, source_server_id

log = logging.getLogger(__name__)

STABLE_DESCRIBE_ATTEMPTS = 5


@dataclass
class StartPlan:
    """Everything the engine needs before it reads the first event."""

    start: BinlogPosition  # a transaction boundary
    applied: BinlogPosition | None  # the checkpoint's applied position (None on a first start)
    offset: StreamOffset  # the checkpoint (translated after a failover), else the start's
    until: BinlogPosition | None  # stop here (``--until now``, or the snapshot mode's highest high watermark)
    decide_at: BinlogPosition  # the binlog end at start (undecided tables, see the module invariants)
    filters: dict[str, HandoffFilter] = field(default_factory=dict)
    tables: dict[str, TableState] = field(default_factory=dict)  # by source table
    undecided: set[str] = field(default_factory=set)
    baselines: list[HistoryEntry] = field(default_factory=list)  # to record before streaming
    live: dict[str, TableSchema] = field(default_factory=dict)  # captured tables as they are now (route checks)
    live_at: BinlogPosition | None = None  # a position ``live`` is the schemas at (no DDL around the describe)
    server_id: int | None = None  # the source's own @@server_id


def _handoff_filters(cfg: BinlakeConfig, store: ControlStore, router, schemas: dict[str, TableSchema],
                     key_orders: KeyOrders) -> tuple[dict[str, HandoffFilter], BinlogPosition | None]:
    """Hand-off filters of the snapshotted tables (their chunk keys in the server's order)
    and their lowest chunk low watermark; a snapshot still running is an error."""
    plans = store.load_plans()
    filters = {}
    low = None
    for n, schema in schemas.items():
        if n not in plans:
            continue
        done = store.completed_chunks(n, open_table(table_uri(cfg.sink.path, router.sink(n)),
                                                    cfg.sink.storage_options))
        missing = [c.index for c in plans[n] if c.index not in done]
        if missing:
            raise StartupError(f"the snapshot of {n} is not complete ({len(missing)} of {len(plans[n])} chunks "
                               "to go): run `binlake snapshot` (or `binlake run`) first")
        filters[n] = HandoffFilter.for_table(schema, plans[n], {
            i: r.high_watermark for i, r in done.items()}, key_orders)
        lws = [r.low_watermark for r in done.values()]
        low = min([low, *lws] if low else lws)
    return filters, low


def stable_describe(conn: ConnectionSettings, server_id: int, cur, names: list[str], source: SourceConfig,
                    base: int = 0) -> tuple[BinlogPosition, dict[str, TableSchema]]:
    """The live captured schemas of ``names`` and a binlog position they are the schemas at:
    the binlog end before and after describing, with no DDL on those tables in between."""
    for _ in range(STABLE_DESCRIBE_ATTEMPTS):
        before = master_position(cur, base)
        schemas = describe_captured(cur, names, source)
        after = master_position(cur, base)
        touched = {t for st in read_statements(conn, server_id, before, after)
                   for t in parse_statement(st.sql, st.database).tables} if after > before else set()
        if not touched & set(names):
            return after, schemas
    raise StartupError(f"the captured tables' schemas kept changing while binlake read them "
                       f"({STABLE_DESCRIBE_ATTEMPTS} attempts): retry when no DDL is running")


def resolve_start(cfg: BinlakeConfig, store: ControlStore, router, conn: ConnectionSettings, cur, *,
                  until_now: bool, key_orders: KeyOrders) -> StartPlan:
    """The start plan (see the module invariants)."""
    names = captured_tables(cfg, cur)
    server_id = source_server_id(cur)
    cp = store.checkpoint()
    if cp is not None and cp.offset.server_id not in (None, server_id):
        cp = dataclasses.replace(cp, offset=fail_over(cfg, store, conn, cur, cp, server_id,
                                                      sorted({router.sink(n) for n in names})))
    base = cp.offset.applied.base if cp else 0
    startup = cfg.source.startup
    mode = startup.mode
    # server_id + 1: the stream's own id may still be registered by a process being replaced.
    live_at, described = stable_describe(conn, cfg.source.server_id + 1, cur, names, cfg.source, base)
    # A first start at the binlog end: the live schemas are the schemas there.
    live = described if cp is None and mode == "latest" else {}
    filters, low_watermark = _handoff_filters(cfg, store, router, described, key_orders)
    if cp is not None:
        start, applied = cp.offset.resume, cp.offset.applied
    elif mode in ("initial", "snapshot"):
        if not filters:
            raise StartupError(f"no snapshot of {', '.join(names) or 'any captured table'}: run `binlake snapshot` "
                               f"(or `binlake run`) before streaming with startup.mode {mode}")
        start, applied = low_watermark, None
    elif mode == "latest":
        start, applied = live_at, None
    elif mode == "earliest":
        start, applied = earliest_position(cur), None
    elif mode == "specific" and startup.gtid:
        start, applied = scan_for_start(conn, cfg.source.server_id, cur, gtid=startup.gtid), None
    elif mode == "specific":
        if not startup.file or startup.pos is None:
            raise StartupError("source.startup.mode specific needs file and pos (or gtid)")
        start, applied = BinlogPosition(startup.file, startup.pos), None
    else:
        if startup.timestamp_ms is None:
            raise StartupError("source.startup.mode timestamp needs timestamp_ms")
        start, applied = scan_for_start(conn, cfg.source.server_id, cur, timestamp_ms=startup.timestamp_ms), None
    end = master_position(cur, base)
    until = end if until_now else None
    if mode == "snapshot" and filters:
        hw = max(f.max_high_watermark for f in filters.values())
        until = hw if until is None else min(until, hw)
    offset = cp.offset if cp else StreamOffset(start, start, server_id=server_id)
    plan = StartPlan(start, applied, offset, until, end, filters, live=described, live_at=live_at, server_id=server_id)
    _known_tables(plan, store.schema_history(), names, live, cfg.source, first_from_past=cp is None and mode in (
        "earliest", "specific", "timestamp"))
    _legacy_baselines(plan, names)
    return plan


def _known_tables(plan: StartPlan, history: list[HistoryEntry], names: list[str], live: dict[str, TableSchema],
                  source: SourceConfig, first_from_past: bool) -> None:
    upto = plan.applied or plan.start
    known = {e.table for e in history}
    for n in known:
        t = plan.tables[n] = fold(n, history, upto)
        if t.schema is not None:  # source.exclude_columns as configured now
            t.schema = without_excluded(t.schema, source)
    for n in names:
        if n in known:
            continue
        if n in live:  # first start at the binlog end: the live schema is the schema there
            plan.tables[n] = TableState(n, live[n], plan.start)
            plan.baselines.append(HistoryEntry(n, plan.start, 0, "baseline", Status.BASELINE,
                                               description="schema at stream start", schema=live[n]))
        elif first_from_past:
            plan.tables[n] = TableState(n)  # its first table map defines it; Delta starts empty
        elif n not in plan.filters:
            plan.undecided.add(n)


def _legacy_baselines(plan: StartPlan, names: list[str]) -> None:
    """Snapshotted tables without a baseline (a snapshot by a binlake that recorded none):
    their live schema, as binlake did then."""
    for n in names:
        if n in plan.filters and n not in plan.tables and n in plan.live:
            schema = plan.live[n]
            log.warning("%s has no baseline schema in the schema history (snapshot taken by an older binlake): "
                        "using its current schema", n)
            at = plan.start
            plan.tables[n] = TableState(n, schema, at)
            plan.baselines.append(HistoryEntry(n, at, 0, "baseline", Status.BASELINE,
                                               description="schema at stream start (no snapshot baseline)",
                                               schema=schema))
