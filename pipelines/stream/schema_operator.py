"""Schema changes in the stream (Flink CDC's SchemaOperator role): DDL statements, table
maps that disagree with the schema history, tables entering and leaving the capture,
and the holds of ``stream.schema_changes: external``.

The engine asks, this part answers, the engine carries out: a change that needs the batch
before it committed comes back as a typed decision — ``Ddl`` (a statement parsed, not
applied), ``RowsUnseen`` (rows changed without row events), ``Diverged`` (a table map or a
live schema that disagrees) — naming the ``tables`` it concerns. The engine waits until none
of them is held, commits its open batch, then hands the decision back (``apply``,
``backfill_unseen``, ``adopt``) and, after a DDL, checkpoints the offset ``apply`` returns.
This part never commits or checkpoints itself.

Invariants (tests/test_schema_at_position.py, tests/test_schema_evolution.py,
tests/test_schema_registry.py):
- Pause, flush, apply, resume: everything before a statement is committed before the
  statement takes effect; inline, its changes are applied to Delta before the next
  event is read; external, the table (a route's whole sink) is held: its later rows
  wait in memory until the schema history shows the change resolved, the checkpoint
  stays before the DDL, and past ``max_held_rows`` held rows reading pauses.
- A table's schema evolves only by events at positions after its baseline: a DDL at or
  before it is already in the baseline and in Delta (a snapshot taken since), and is
  not applied again.
- A table whose schema before a DDL is unknown (a first start from a past position,
  before its first row) is not changed in Delta: its next table map defines it, and
  Delta has no rows of it yet.
- A table map that disagrees with the declared schema (cdc_core/schema/history.py:
  Divergence) is never silent: the batch before it is committed, the table map's
  columns are adopted, Delta follows by name under the behaviour (``exception`` stops),
  and when Delta already had rows of the table it is recorded as needing a backfill
  (``binlake status`` shows it) — existing rows may hold values MySQL changed in ways
  the binlog's rows do not show (a DEFAULT, a rename, a conversion).
- A table's first table map (its schema unknown before) defines it without a commit of its own:
  the baselines of every table a batch met first are recorded in one schema-history commit and
  their Delta tables opened or created (in parallel) when the batch commits, before its data
  (``open_new``); a crash before leaves nothing, one after finds the baselines, then the tables,
  without rows of them (tests/test_many_tables.py).
- Every error applying a change names the table, the statement and its position.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cdc_core.batch.table_batch import keyless_problem
from cdc_core.binlog.events import Statement, TableLayout
from cdc_core.config import BinlakeConfig
from cdc_core.errors import BinlakeError, TerminalError, is_transient
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.routes import RouteError, Router, sink_schema
from cdc_core.schema.change import SchemaChange, UnparsedDDL, evolve_all, evolve_schema, parse_ddl
from cdc_core.schema.history import Divergence, HistoryEntry, Status, TableState, conversion_schema
from cdc_core.schema.modes import TableMode, position_text
from cdc_core.schema.output import delta_name, output_schema
from cdc_core.schema.statements import parse_statement
from cdc_core.schema.table import TableSchema, describe_table
from cdc_core.source.capture import NotCapturable, captured_change, captured_schema
from cdc_core.source.connection import ConnectionSettings, connect
from pipelines.lake.control_store import ControlStore
from pipelines.lake.offsets import stream_commit_properties
from pipelines.lake.reads import count_rows
from pipelines.lake.tables import reset
from pipelines.lake.versions import end_all
from pipelines.schema.applier import SchemaChangeRejected, apply_schema_change, widen_to
from pipelines.schema.registry import PendingChange, apply_pending, resolutions
from pipelines.stream.sinks import Sinks
from pipelines.stream.state import EngineState, HistoryRecorder, Hold

log = logging.getLogger(__name__)

HOLD_POLL_SECONDS = 0.5  # how often a held table's change is looked up in the schema history
APPEARED = "entered the capture list with existing rows while the stream was stopped: needs a backfill (not streamed)"
PARTIAL_IMAGE = ("rows changed with images that leave columns out (its session's binlog_row_image was not FULL) at "
                 "{at}: needs a backfill (not streamed until it is done)")
ROWS_AS_STATEMENT = ("rows changed by a statement the binlog holds as SQL, not as rows (its session had binlog_format "
                     "STATEMENT or MIXED) at {at}: needs a backfill (not streamed until it is done)")


class SchemaChangeFailed(TerminalError):
    """Applying a schema change failed; the message names the table, statement and position."""


@dataclass(frozen=True)
class Ddl:
    """A DDL statement read and parsed, not applied: the engine first waits until none of
    ``tables`` is held (a table's changes stay in binlog order) and commits its open batch
    (everything before the statement is durable before it takes effect), then calls
    :meth:`SchemaChanges.apply`."""

    statement: Statement
    changes: tuple[SchemaChange, ...]
    unparsed: UnparsedDDL | None  # changes known, not the values existing rows take
    tables: tuple[str, ...]  # every table it touches, also by a new name
    seen: float  # time.monotonic() when it was read (how long it was held)


@dataclass(frozen=True)
class RowsUnseen:
    """Rows of ``tables`` (streamed and captured) changed at ``at`` without row events: each is
    backfilled (:meth:`SchemaChanges.backfill_unseen`) once the engine committed the batch
    before ``at``. No tables: nothing to do."""

    tables: tuple[str, ...]
    at: BinlogPosition
    kind: str
    detail: str
    ddl: str = ""


@dataclass(frozen=True)
class Diverged:
    """``table``'s columns disagree with its declared schema (cdc_core/schema/history.py): they
    are adopted (:meth:`SchemaChanges.adopt`) once the engine committed the batch before."""

    table: str
    schema: TableSchema
    divergence: Divergence

    @property
    def tables(self) -> tuple[str, ...]:
        return (self.table,)


@dataclass(frozen=True)
class Conversion:
    """The columns rows of a table map are decoded with (None: the table is not streamed, it
    cannot be), and the divergence to adopt first, if the table map disagrees."""

    schema: TableSchema | None
    diverged: Diverged | None = None


class SchemaChanges:
    """DDL, table maps, capture changes and holds (see the module invariants)."""

    def __init__(self, cfg: BinlakeConfig, router: Router, state: EngineState, sinks: Sinks, store: ControlStore,
                 recorder: HistoryRecorder, conn: ConnectionSettings):
        self.cfg = cfg
        self.behavior = cfg.pipeline.schema_change_behavior
        self.router = router
        self.state = state
        self.sinks = sinks
        self.store = store
        self.recorder = recorder
        self.conn = conn  # the source, for a CREATE TABLE … LIKE a table not streamed
        self._polled = 0.0
        # Tables whose first table map was read since the last commit, not opened in Delta yet:
        # their schema and the offset before their first row (open_new).
        self._new: dict[str, tuple[TableSchema, StreamOffset]] = {}

    # --- statements -----------------------------------------------------------------------------

    def partial_image(self, name: str, at: BinlogPosition) -> RowsUnseen:
        """A row event of ``name`` whose images leave columns out: its rows cannot be known."""
        return self._rows_unseen([name], at, "partial_image", PARTIAL_IMAGE.format(at=at))

    def _rows_unseen(self, names: list[str], at: BinlogPosition, kind: str, detail: str, ddl: str = ""
                     ) -> RowsUnseen:
        s = self.state
        hit = [n for n in names if n in s.tables and s.tables[n].streamed and self.cfg.source.captures(n)]
        return RowsUnseen(tuple(hit), at, kind, detail, ddl)

    def backfill_unseen(self, u: RowsUnseen) -> None:
        """Record each table of ``u`` as needing a backfill (the batch before it is committed)."""
        for name in u.tables:
            self.needs_backfill(name, u.at, 0, u.kind, u.detail, ddl=u.ddl)

    def rows_as_statement(self, st: Statement) -> RowsUnseen | None:
        """A row change logged as SQL (cdc_core/schema/statements.py's ``dml``): its rows are not in
        the binlog, so every streamed table it may have written is to be backfilled. None:
        ``st`` is not one."""
        stmt = parse_statement(st.sql, st.database)
        if stmt.kind != "dml":
            return None
        return self._rows_unseen(list(stmt.tables), st.position, "statement",
                                 ROWS_AS_STATEMENT.format(at=st.position), ddl=st.sql)

    def ddl(self, st: Statement) -> Ddl:
        """A DDL statement parsed against the schemas in force (not applied yet)."""
        seen = time.monotonic()
        s, p = self.state, st.position
        unparsed = None
        try:
            changes = parse_ddl(st.sql, st.database)
            # A statement that does not fit the schemas in force (a column it names is not there)
            # is as unreadable as one that does not parse; DDL already in a baseline is not checked.
            evolve_all({n: t.schema for n, t in s.tables.items()
                        if t.streamed and t.schema is not None and not t.reflects(p)}, changes)
        except UnparsedDDL as e:
            # Changes known but not the values existing rows take (DEFAULT (UUID()), ...): applied,
            # and the table recorded as needing a backfill.
            changes, unparsed = list(e.changes), e
        touched = [c.table for c in changes] + [c.new_name for c in changes if c.new_name] + list(
            unparsed.tables if unparsed else ())
        return Ddl(st, tuple(changes), unparsed, tuple(touched), seen)

    def apply(self, ddl: Ddl) -> StreamOffset:
        """Apply a DDL (the engine committed everything before it): the stream passes the
        statement, each change takes effect. Returns the offset past the statement, for the
        engine to checkpoint."""
        s, st = self.state, ddl.statement
        p = st.position
        s.boundary(p, st.gtid, st.timestamp)
        offset = s.offset_here()
        if ddl.unparsed is not None:
            self._unparsed(ddl.unparsed, st)
        for i, change in enumerate(ddl.changes):
            try:
                self._change(change, i, st, offset, ddl.seen)
            except BinlakeError:
                raise
            except Exception as e:
                if is_transient(e):
                    raise  # retried by reading again from the checkpoint, which is before this statement
                raise SchemaChangeFailed(f"{change.table}: applying the DDL at {p} failed ({change.describe()}): "
                                         f"{type(e).__name__}: {e} — DDL: {st.sql}") from e
        return offset

    def _unparsed(self, e: UnparsedDDL, st: Statement) -> None:
        s, p = self.state, st.position
        captured = [n for n in e.tables if self.cfg.source.captures(n)]
        created = st.sql.lstrip().upper().startswith("CREATE")
        for n in captured:
            t = s.tables.get(n)
            backfill = False
            if created and e.changes:  # created from the columns known; its first table map shows the rest
                detail = f"{e}; the columns known are created, any others show in its first table map"
            elif created:  # its first table map will say what the new (empty) table has
                self._created(n, None, st)
                detail = f"{e}; the new table's columns are taken from its first table map"
            elif e.rows_changed and t is None:  # rows moved into a table not streamed yet (CONVERT … TO TABLE)
                self.needs_backfill(n, p, 0, "unparsed", f"{e}; its rows came without row events: needs a backfill")
                continue
            elif t is None or not t.streamed or t.reflects(p):
                continue
            elif e.changes:
                sink = self.router.sink(n)
                backfill = sink in self.sinks and count_rows(
                    self.sinks.tables[sink], n if self.router.routed(n) else None) > 0
                detail = f"{e}; the columns are applied" + (
                    ", the values existing rows took are not known: needs a backfill" if backfill else "")
                t.needs_backfill = t.needs_backfill or backfill
            elif e.rows_changed:  # partition maintenance: its rows changed, none in the binlog
                backfill = t.needs_backfill = True
                detail = f"{e}; its rows changed without row events: needs a backfill"
            else:
                detail = f"{e}; a change of the table's columns shows in its next table map"
            self.recorder.entry(n, p, 0, "unparsed", Status.UNPARSED, ddl=st.sql, detail=detail,
                                needs_backfill=backfill)
        if not e.tables:
            self.recorder.entry("?", p, 0, "unparsed", Status.UNPARSED, ddl=st.sql, detail=str(e))
        if self.behavior == "exception" and captured and not created:
            raise SchemaChangeRejected(f"schema_change_behavior is exception and the DDL on {', '.join(captured)} "
                                       f"at {p} cannot be parsed: {st.sql}") from None
        log.warning("DDL at %s not understood, recorded in the schema history: %s", p, e)

    def _change(self, c: SchemaChange, index: int, st: Statement, offset: StreamOffset, seen: float) -> None:
        """Pause/flush/apply/resume for one change (the batch before it is committed)."""
        s, p, name = self.state, st.position, c.table
        t = s.tables.get(name)
        props = stream_commit_properties(self.cfg.pipeline.name, offset)
        if t is not None and t.reflects(p):
            return  # already in the table's baseline (a snapshot taken after this statement)
        if c.kind == "truncate_table":
            if t is not None and t.streamed and self.router.sink(name) in self.sinks \
                    and not s.skip.applied(self.router.sink(name), p):
                self._empty(name, props, st)
                log.info("%s truncated at %s", name, p)
            return
        if c.kind == "create_table":
            if self.cfg.source.captures(name):
                self._create(c, index, st, props, seen)
            return
        if c.kind in ("drop_table", "rename_table"):
            self._leave(c, index, st)
            return
        c = captured_change(c, self.cfg.source)  # changes of excluded columns are not captured
        if c is None or t is None or not t.streamed:
            return
        if t.schema is None:
            self.recorder.entry(name, p, index, c.kind, Status.RECORDED, ddl=st.sql, description=c.describe(),
                                detail="the table's schema before this statement is unknown (the stream started "
                                       "at a past position): its next table map defines it")
            return
        before = t.schema
        after = evolve_schema(before, c)
        self.recorder.entry(name, p, index, c.kind, Status.PENDING, ddl=st.sql, description=c.describe(),
                            schema=after)
        pending = PendingChange(name, p, index, c.kind, st.sql, c.describe(), after,
                                datetime.now(UTC) - timedelta(seconds=time.monotonic() - seen))
        s.set_schema(name, after)  # rows after the DDL are checked against the new schema
        sink = self.router.sink(name)
        if sink not in self.sinks:
            self.recorder.entry(name, p, index, c.kind, Status.APPLIED, ddl=st.sql, description=c.describe(),
                                schema=after, detail="no Delta table yet: created from the new schema")
            return
        if self.cfg.stream.schema_changes == "external":
            # The whole sink is held: a route's other sources must not move the sink's offset past rows held here.
            s.holds[sink] = Hold(pending, before, s.offset)
            log.info("%s held at %s until %s is applied (Dagster sensor)", sink, p, c.describe())
            return
        apply_pending(self.cfg, pending, store=self.store, table=self.sinks.tables[sink])
        self.sinks.refresh(sink)

    def _create(self, c: SchemaChange, index: int, st: Statement, props, seen: float) -> None:
        s, p, name = self.state, st.position, c.table
        known = s.tables.get(name)
        if c.conditional and known is not None and known.streamed:
            return  # CREATE TABLE IF NOT EXISTS of a table that exists: nothing happens (MySQL 8 logs it)
        schema = c.schema
        if schema is None and c.like:
            like = s.tables.get(c.like)
            schema = (like.schema if like is not None and like.schema is not None else self._describe(c.like))
            schema = schema.renamed(name)
        try:  # what is captured of the new table (source.exclude_columns, key_columns, mappable types)
            schema = captured_schema(schema, self.cfg.source)
        except NotCapturable as e:
            log.error("%s is not streamed: %s", name, e)
            self._not_streamed(c, index, st, f"not streamed: {e}")
            return
        problem = keyless_problem(schema)
        if problem:
            self._not_streamed(c, index, st, f"not streamed: {problem}")
            return
        if self.router.routed(name) or self.router.is_sink(name):  # a route's sink: never overwrite it
            self._create_routed(c, schema, index, st, props, seen)
            return
        self._created(name, schema, st, props)
        self.recorder.entry(name, p, index, c.kind, Status.APPLIED, schema=schema, ddl=st.sql,
                            description=c.describe(), detail="captured from its creation",
                            held_ms=(time.monotonic() - seen) * 1000)

    def _describe(self, name: str) -> TableSchema:
        with connect(self.conn) as c, c.cursor() as cur:
            return describe_table(cur, *name.split(".", 1))

    def _not_streamed(self, c: SchemaChange, index: int, st: Statement, detail: str) -> None:
        self.state.undecided.discard(c.table)
        self.state.tables[c.table] = TableState(c.table, streamed=False)
        self.recorder.entry(c.table, st.position, index, c.kind, Status.RECORDED, ddl=st.sql, description=c.describe(),
                            detail=detail)

    def _created(self, name: str, schema: TableSchema | None, st: Statement, props=None) -> None:
        """Table ``name`` (re)created by ``st``: captured from its creation, its Delta rows none."""
        s, p = self.state, st.position
        s.undecided.discard(name)
        s.tables[name] = TableState(name, streamed=True)
        s.set_schema(name, schema)
        sink = self.router.sink(name)
        props = props or stream_commit_properties(self.cfg.pipeline.name, s.offset_here())
        if schema is None:  # columns unknown until its first table map: empty any old rows of that name now
            dt = self.sinks.existing(sink)
            routed = self.router.routed(name)
            if dt is not None and not s.skip.applied(sink, p) and count_rows(dt, name if routed else None):
                self._empty(name, props, st)
                self.sinks.refresh(sink)
            return
        dt = self.sinks.open(name, schema, s.streamed())
        columns = self.sinks.columns(sink)
        reused = dt.version() > 0 or self.sinks.schemas[sink] != output_schema(schema, columns.fields())
        if reused and not s.skip.applied(sink, p):
            # A table of that name existed before (dropped since): MySQL's new table is empty.
            if columns.mode is TableMode.CURRENT:
                reset(dt, props, schema=output_schema(schema, columns.fields()))
            else:  # its rows end, their past stays; Delta takes the new table's columns by name
                self._empty(name, props, st)
                self._reconcile(name, schema)
            self.sinks.refresh(sink)

    def _empty(self, name: str, props, st: Statement) -> None:
        """``name``'s rows gone at statement ``st`` (TRUNCATE, a table created again): removed, a
        routed source's rows only (its sink holds the other sources' too); in a soft_delete or
        history table made tombstones or closed (pipelines/lake/versions.py: ``end_all``)."""
        sink = self.router.sink(name)
        dt, columns = self.sinks.tables[sink], self.sinks.columns(sink)
        if columns.mode is TableMode.CURRENT:
            reset(dt, props, source=name if self.router.routed(name) else None)
        else:
            at = position_text(st.position, st.gtid)
            end_all(dt, columns, props, st.timestamp * 1_000_000, st.position.seq(), at)

    def _create_routed(self, c: SchemaChange, schema: TableSchema, index: int, st: Statement, props,
                       seen: float) -> None:
        """A new table matching a route: captured from its creation into the route's sink,
        which widens to hold it; refused (recorded, not streamed) if it cannot share the sink,
        or if it is an unrouted table named like a route's sink."""
        s, p, name = self.state, st.position, c.table
        sink = self.router.sink(name)
        others = {n: sch for n, sch in s.streamed().items() if self.router.sink(n) == sink}
        s.undecided.discard(name)
        try:
            self.router.check({**others, name: schema})
            dt = self.sinks.open(name, schema, {**others, name: schema})
            target = sink_schema([schema], base=self.sinks.schemas[sink], sink=sink)
        except RouteError as e:
            s.tables[name] = TableState(name, streamed=False)
            self.recorder.entry(name, p, index, c.kind, Status.RECORDED, ddl=st.sql, description=c.describe(),
                                detail=f"cannot join route sink {sink}, not streamed: {e}")
            log.error("%s is not streamed: %s", name, e)
            return
        if not s.skip.applied(sink, p):
            widen_to(dt, target, props)
            if count_rows(dt, name):  # routed here before (dropped since): MySQL's new table is empty
                reset(dt, props, source=name)
            self.sinks.refresh(sink)
        s.tables[name] = TableState(name, streamed=True)
        s.set_schema(name, schema)
        self.recorder.entry(name, p, index, c.kind, Status.APPLIED, schema=schema, ddl=st.sql,
                            description=c.describe(), detail=f"captured from its creation into {sink}",
                            held_ms=(time.monotonic() - seen) * 1000)

    def _leave(self, c: SchemaChange, index: int, st: Statement) -> None:
        """DROP TABLE / RENAME TABLE: the old name leaves the capture (its Delta table is kept);
        a captured new name enters it with rows Delta does not have."""
        s, p, name = self.state, st.position, c.table
        t = s.tables.get(name)
        if t is not None and t.streamed:
            t.streamed = False
            self.recorder.entry(name, p, index, c.kind, Status.RECORDED, ddl=st.sql, description=c.describe(),
                                detail="no longer captured under this name; the Delta table is kept")
        if c.kind == "rename_table" and self.cfg.source.captures(c.new_name):
            self.needs_backfill(c.new_name, p, index, c.kind, f"entered the capture list by {c.describe()} with "
                                                             "existing rows: needs a backfill (not streamed)", st.sql)

    def needs_backfill(self, name: str, p: BinlogPosition, index: int, kind: str, detail: str, ddl: str = "") -> None:
        """``name`` holds rows Delta does not have: recorded, not streamed until backfilled."""
        s = self.state
        s.undecided.discard(name)
        s.tables[name] = TableState(name, streamed=False, needs_backfill=True)
        self.recorder.entry(name, p, index, kind, Status.RECORDED, ddl=ddl, detail=detail, needs_backfill=True)
        log.warning("%s: %s", name, detail)

    def decide(self, position: BinlogPosition) -> None:
        """Past the binlog end at start: tables still undecided existed before it (module invariants)."""
        for name in sorted(self.state.undecided):
            self.needs_backfill(name, position, 0, "appeared", APPEARED)

    # --- table maps -----------------------------------------------------------------------------

    def conversion(self, name: str, layout: TableLayout, position: BinlogPosition) -> Conversion:
        """The columns rows of ``name`` written with ``layout`` are decoded with (cached by the
        engine per layout); a table's first table map defines its schema, and one that
        disagrees comes back with the divergence the engine has adopted first."""
        t = self.state.tables[name]
        schema, divergence = conversion_schema(t.schema, layout.schema, position)
        if t.schema is None:
            return Conversion(self._first_layout(name, schema))
        return Conversion(schema, Diverged(name, schema, divergence) if divergence is not None else None)

    def _first_layout(self, name: str, schema: TableSchema) -> TableSchema | None:
        s = self.state
        problem = keyless_problem(schema)
        if problem:
            s.tables[name].streamed = False
            self.recorder.entry(name, s.position, 0, "baseline", Status.RECORDED, detail=f"not streamed: {problem}")
            return None
        s.set_schema(name, schema)
        baseline = HistoryEntry(name, s.position, 0, "baseline", Status.BASELINE, schema=schema,
                                description="schema from the table's first table map")
        if self.router.routed(name):
            self.recorder.record(baseline)
            self.sinks.open(name, schema, s.streamed())
            sink = self.router.sink(name)
            widen_to(self.sinks.tables[sink], sink_schema([schema], base=self.sinks.schemas[sink], sink=sink))
            self.sinks.refresh(sink)
        else:  # its baseline and its Delta table wait for the batch's commit (open_new)
            self.recorder.defer(baseline)
            self.sinks.expect(name, schema)
            self._new[name] = (schema, s.offset_here())
        return schema

    def open_new(self) -> None:
        """Before a batch commits (the engine asks, also with nothing to commit): the baselines of the
        tables whose first table map it read, in one commit to the schema history, then their Delta
        tables opened (created where missing, in parallel) and made to hold their columns. A crash
        before this leaves no trace of them (the stream reads their table maps again); one after it
        finds what a restart expects: the baselines, then the tables, before any of their rows."""
        self.recorder.flush()
        if not self._new:
            return
        # (forgotten only once done: after a fault that passes, the next commit does it again)
        self.sinks.open_all({n: schema for n, (schema, _) in self._new.items()}, self.state.streamed())
        for name, (schema, offset) in self._new.items():
            self._reconcile(name, schema, offset)
        self._new = {}

    def live_divergences(self, live: dict[str, TableSchema], position: BinlogPosition) -> list[Diverged]:
        """At the position the live schemas were described at: each streamed table whose schema
        there differs from its live one changed without a DDL binlake read (stream/start.py)."""
        found = []
        for name, schema in sorted(self.state.streamed().items()):
            if name not in live:
                continue
            _, d = conversion_schema(schema, live[name], position)
            if d is not None:
                found.append(Diverged(name, live[name], d))
        return found

    def adopt(self, diverged: Diverged) -> None:
        """Adopt a table's diverging columns (the engine committed the batch before): Delta
        follows by name under the behaviour, and a table Delta has rows of needs a backfill."""
        s, name, schema, d = self.state, diverged.table, diverged.schema, diverged.divergence
        if self.behavior == "exception":
            self.recorder.entry(name, s.position, 0, "diverged", Status.FAILED, schema=schema, detail=d.describe())
            raise SchemaChangeRejected(f"{d.describe()}, and schema_change_behavior is exception: the table's "
                                       "columns changed in a way binlake did not read from a DDL")
        sink = self.router.sink(name)
        had_rows = sink in self.sinks and count_rows(self.sinks.tables[sink],
                                                     name if self.router.routed(name) else None) > 0
        if self.behavior != "ignore":
            self._reconcile(name, schema)
        backfill = had_rows and bool(d.added or d.retyped)
        s.set_schema(name, schema)
        self.recorder.entry(name, s.position, 0, "diverged", Status.DIVERGED, schema=schema, needs_backfill=backfill,
                            detail=d.describe() + ("; Delta's existing rows may differ from MySQL: needs a backfill"
                                                   if backfill else ""))
        s.tables[name].needs_backfill = s.tables[name].needs_backfill or backfill
        log.warning("%s%s", d.describe(), ": needs a backfill" if backfill else "")

    def _reconcile(self, name: str, schema: TableSchema, offset: StreamOffset | None = None) -> None:
        """Make the Delta table of ``name`` hold ``schema``'s columns, by name, under the behaviour; a
        change committed with ``offset`` (default: the offset of everything read so far)."""
        s = self.state
        sink = self.router.sink(name)
        if sink not in self.sinks:
            self.sinks.open(name, schema, s.streamed())
        if self.router.routed(name):
            widen_to(self.sinks.tables[sink], sink_schema([schema], base=self.sinks.schemas[sink], sink=sink))
            self.sinks.refresh(sink)
            return
        props = stream_commit_properties(self.cfg.pipeline.name, offset or s.offset_here())
        current = self.sinks.schemas[sink]
        for col, field in zip(schema.columns, output_schema(schema)):
            have = delta_name(current.names, col.name)
            if have is None:
                change = SchemaChange("add_column", name, column=col)
            elif current.field(have).type != field.type:
                change = SchemaChange("alter_column_type", name, column=col, name=have)
            else:
                continue
            apply_schema_change(self.sinks.tables[sink], change, self.behavior, props)
            self.sinks.refresh(sink)
            current = self.sinks.schemas[sink]

    # --- held tables (stream.schema_changes: external) -----------------------------------------------

    def poll_holds(self, force: bool = False) -> None:
        """Release every held table whose change the schema history shows resolved."""
        s = self.state
        now = time.monotonic()
        if not s.holds or (not force and now - self._polled < HOLD_POLL_SECONDS):
            return
        self._polled = now
        resolved = resolutions(self.store)
        for sink, hold in list(s.holds.items()):
            name = hold.pending.table
            r = resolved.get(hold.pending.key)
            if r is None:
                continue
            if r.status == Status.FAILED:
                raise SchemaChangeRejected(f"the schema change of {name} at {hold.pending.position} failed: "
                                           f"{r.detail} (DDL: {hold.pending.ddl})")
            del s.holds[sink]
            self.sinks.refresh(sink)  # the change was committed by another process
            s.batch.absorb(hold.batch)  # none of the sink's sources is in the open batch: their rows went to the hold
            log.info("%s released: %s %s (%s)", name, hold.pending.description, r.status, r.detail)

    def drop_holds(self) -> None:
        """Forget held rows before reading again from the checkpoint, which is before their DDLs."""
        s = self.state
        for hold in s.holds.values():
            s.set_schema(hold.pending.table, hold.before)
        s.holds.clear()

    def held(self, names: tuple[str, ...] | list[str]) -> bool:
        """Whether any of ``names`` is held (its route's sink is)."""
        return any(self.router.sink(n) in self.state.holds for n in names)
