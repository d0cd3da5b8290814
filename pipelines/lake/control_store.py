"""Control state under ``<sink>/_binlake/`` in Delta tables: snapshot chunk plans and
completed chunks with their watermarks, the schema history, the stream checkpoint,
backfill requests and reconcile results (``reconcile_runs``, written only by ``binlake reconcile``).

Invariants (tests/test_snapshot_resume.py, tests/test_table_batch.py):
- A chunk is complete iff its rows are committed in its data table; the data commit
  itself carries the chunk record (commit metadata), and the ``snapshot_chunks`` table
  mirrors it for readers. Recovery unions both, so a crash between the data commit and
  the mirror loses nothing.
- The latest checkpoint is the one written last (its ``seq``, one more than the
  previous one's), never chosen by wall-clock time: a clock step cannot make a restart
  resume from an older checkpoint. Positions cannot choose either: while a table is held
  for a schema change the checkpoint deliberately stays behind.
- A write that fails on a fault that passes is retried within the store's retry budget
  (cdc_core/retry.py), and never made twice: each append carries a token in its commit
  metadata (``binlake.write``), and before a new attempt the table's latest commits are read
  for it (a store that did the write but lost its answer). A checkpoint is written again
  blindly: a repeated row is the same checkpoint. delta-rs, retrying a put whose answer was
  lost, may itself commit an append again at the next version: it adds the same file, which a
  Delta table holds once (tests/test_lake_faults.py).
- A control table is opened once per store while no fault comes between: a table read is
  written through the handle it was read by (the stream checkpoint too), one only appended to
  through a handle opened at its second append; a table appended to reads the same as a fresh
  store's read (tests/test_lake_requests.py).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from cdc_core.chunks.incremental import BackfillRequest, latest_requests
from cdc_core.chunks.planning import Chunk, decode_value
from cdc_core.chunks.record import ChunkRecord
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.retry import RetryPolicy, retrying
from cdc_core.schema.history import HistoryEntry, Status
from cdc_core.schema.table import TableSchema
from pipelines.lake.files import SnapshotCommits, snapshot_commits
from pipelines.lake.tables import BINLAKE_TABLE_PROPERTIES, commit_with_token, open_table, post_commit_hooks, worn

PLAN_SCHEMA = pa.schema([
    ("pipeline", pa.string()), ("table", pa.string()), ("chunk_index", pa.int32()), ("chunk_key", pa.string()),
    ("bounds", pa.string()), ("planned_at", pa.timestamp("us", tz="UTC")),
])
CHECKPOINT_SCHEMA = pa.schema([
    ("pipeline", pa.string()), ("state", pa.string()), ("resume_file", pa.string()), ("resume_pos", pa.int64()),
    ("applied_file", pa.string()), ("applied_pos", pa.int64()), ("gtid", pa.string()), ("event_time", pa.int64()),
    ("rows_applied", pa.int64()), ("committed_at", pa.timestamp("us", tz="UTC")), ("seq", pa.int64()),
    ("offset", pa.string()),  # the whole offset as JSON (cdc_core/offset/stream_offset.py), from failover on
])
# The checkpoint table gains one small file per batch; past this many live rows it is
# rewritten as its latest row (one atomic overwrite), so reading it stays cheap.
CHECKPOINT_COMPACT_ROWS = 500
HISTORY_SCHEMA = pa.schema([
    ("pipeline", pa.string()), ("table", pa.string()), ("file", pa.string()), ("pos", pa.int64()),
    ("change_index", pa.int32()), ("kind", pa.string()), ("description", pa.string()), ("ddl", pa.string()),
    ("schema_json", pa.string()), ("status", pa.string()), ("detail", pa.string()), ("held_ms", pa.float64()),
    ("recorded_at", pa.timestamp("us", tz="UTC")), ("needs_backfill", pa.bool_()),
    ("base", pa.int32()),  # the position's base (after a failover; cdc_core/offset/position.py)
])
RECONCILE_SCHEMA = pa.schema([
    ("pipeline", pa.string()), ("table", pa.string()), ("sink", pa.string()),
    ("started_at", pa.timestamp("us", tz="UTC")), ("seconds", pa.float64()), ("equal", pa.bool_()),
    ("chunks_checked", pa.int64()), ("mismatched_chunks", pa.int64()), ("mismatches", pa.string()),
    ("excluded_columns", pa.string()), ("mysql_rows", pa.int64()), ("delta_rows", pa.int64()),
    ("server_file", pa.string()), ("server_pos", pa.int64()), ("stream_file", pa.string()), ("stream_pos", pa.int64()),
    ("rechecks", pa.int32()), ("delta_version", pa.int64()),
])
CHUNKS_SCHEMA = pa.schema([
    ("pipeline", pa.string()), ("table", pa.string()), ("chunk_index", pa.int32()), ("rows", pa.int64()),
    ("lw_file", pa.string()), ("lw_pos", pa.int64()), ("hw_file", pa.string()), ("hw_pos", pa.int64()),
    ("window_changes", pa.int64()), ("delta_version", pa.int64()), ("completed_at", pa.timestamp("us", tz="UTC")),
    ("base", pa.int32()),  # the watermarks' position base (after a failover; cdc_core/offset/position.py)
])

BACKFILL_SCHEMA = pa.schema([
    ("pipeline", pa.string()), ("id", pa.string()), ("table", pa.string()), ("lo", pa.string()), ("hi", pa.string()),
    ("reason", pa.string()), ("state", pa.string()), ("plan", pa.string()), ("chunks_done", pa.int32()),
    ("rows", pa.int64()), ("detail", pa.string()), ("seq", pa.int64()), ("updated_at", pa.timestamp("us", tz="UTC")),
])

MAINTENANCE_RUNS_SCHEMA = pa.schema([
    ("pipeline", pa.string()), ("table", pa.string()), ("kind", pa.string()), ("at", pa.timestamp("us", tz="UTC")),
    ("reason", pa.string()), ("files_before", pa.int64()), ("files_after", pa.int64()), ("files_removed", pa.int64()),
    ("files_added", pa.int64()), ("bytes_removed", pa.int64()), ("bytes_added", pa.int64()),
    ("files_deleted", pa.int64()), ("bytes_deleted", pa.int64()), ("live_bytes", pa.int64()),
    ("stored_bytes", pa.int64()), ("seconds", pa.float64()), ("delta_version", pa.int64()),
])
# Past this many files the maintenance_runs table is rewritten as each table's latest run of each kind.
MAINTENANCE_RUNS_COMPACT_FILES = 500
MAINTENANCE_REQUEST_SCHEMA = pa.schema([
    ("pipeline", pa.string()), ("id", pa.string()), ("table", pa.string()), ("state", pa.string()),
    ("detail", pa.string()), ("seq", pa.int64()), ("updated_at", pa.timestamp("us", tz="UTC")),
])


# Commit metadata of a control-table append: a token of its own, found again after a fault.
WRITE_KEY = "binlake.write"


class ControlStore:
    """Snapshot plans and progress of one pipeline; writes retried under ``retry``."""

    def __init__(self, sink_path: str, pipeline: str, storage_options: dict | None = None,
                 retry: RetryPolicy | None = None):
        self.root = f"{sink_path.rstrip('/')}/_binlake"
        self.pipeline = pipeline
        self.storage_options = storage_options or None
        self.retry = retry or RetryPolicy()
        self._checkpoints = None  # the stream_checkpoint table, once it exists
        self._checkpoint_seq: int | None = None  # seq of the last checkpoint written (read once)
        # Control tables as last read (or appended to) by this store: read again only when
        # another writer changed them (on an object store a fresh open costs several requests,
        # a check one LIST).
        self._cache: dict[str, _Read] = {}
        # Control tables this store appended to without reading them: this pipeline's rows of those
        # appends and how many commits they made (see _read).
        self._appended: dict[str, tuple[list[dict], int]] = {}
        # Handles of control tables appended to more than once without reading them: a write
        # through a handle leaves it at the version it committed, where a write by URI opens the
        # table each time (on an object store four requests, and a listing of the whole log).
        self._writers: dict[str, DeltaTable] = {}
        # snapshot_chunks rows as records, parsed once per read of the table (see chunk_records).
        self._chunk_records: tuple[_Read | None, list[ChunkRecord]] = (None, [])

    @classmethod
    def of(cls, cfg, retry: RetryPolicy | None = None) -> ControlStore:
        """The control store of a pipeline config (``cdc_core.config.BinlakeConfig``)."""
        return cls(cfg.sink.path, cfg.pipeline.name, cfg.sink.storage_options, retry)

    def _renew(self, name: str) -> None:
        """Reopen control table ``name`` when a handle this store keeps of it is worn
        (pipelines/lake/tables.py: ``RENEW_VERSIONS``): a checkpoint per batch moves the
        stream_checkpoint handle a version per batch."""
        cached = self._cache.get(name)
        held = [cached.table if cached else None, self._writers.get(name),
                self._checkpoints if name == "stream_checkpoint" else None]
        if any(t is not None and worn(t) for t in held):
            self.reopen(name)

    def _read(self, name: str) -> list[dict]:
        self._renew(name)
        cached = self._cache.get(name)
        if cached is not None:
            t = cached.table
            t.update_incremental()
            if t.version() == cached.version:
                return list(cached.rows)
        else:
            t = self._writers.pop(name, None)
            if t is not None:
                t.update_incremental()  # another writer's commits too
            else:
                t = open_table(f"{self.root}/{name}", self.storage_options)
            if t is None:
                return []
            appended, commits = self._appended.pop(name, ([], 0))
            if commits and t.version() == commits - 1:
                # As many commits as this store's appends made, and all of those are there: the
                # table holds only their rows, known without reading its files back.
                self._cache[name] = _Read(t, t.version(), appended)
                return list(appended)
        rows = [r for r in t.to_pyarrow_table().to_pylist() if r["pipeline"] == self.pipeline]
        self._cache[name] = _Read(t, t.version(), rows)
        return list(rows)

    def reopen(self, name: str) -> None:
        """Open control table ``name`` afresh on next use: a handle kept for the stream's life grows
        with every commit it has seen, so maintenance reopens it after each vacuum (which writes a
        checkpoint). The rows read stay cached: they are read again only if the version moved."""
        if name == "stream_checkpoint":
            self._checkpoints = None
        self._writers.pop(name, None)
        cached = self._cache.get(name)
        if cached is not None:
            fresh = open_table(f"{self.root}/{name}", self.storage_options)
            if fresh is not None:
                cached.table = fresh

    def _append(self, name: str, rows: list[dict], schema: pa.Schema) -> None:
        self._renew(name)
        data = pa.Table.from_pylist(rows, schema=schema)
        token = uuid.uuid4().hex
        uri = f"{self.root}/{name}"
        cached = self._cache.get(name)
        before = cached.table.version() if cached else None
        faulted: list[bool] = []  # an attempt failed: what this store knows of the table may not hold

        def attempt() -> None:
            handle = None if faulted else cached.table if cached else self._writer(name)
            # merge: control tables written by an earlier binlake gain the columns added since.
            write_deltalake(handle or uri, data, mode="append", schema_mode="merge",
                            storage_options=None if handle else self.storage_options,
                            commit_properties=CommitProperties(custom_metadata={WRITE_KEY: token}),
                            post_commithook_properties=post_commit_hooks(handle) if handle else None,
                            # When the append creates the table (stream_checkpoint is committed every batch);
                            # not set on older control tables: a property change fails the appends of every
                            # handle opened before it.
                            configuration=BINLAKE_TABLE_PROPERTIES)

        def landed() -> int | None:
            faulted.append(True)
            self._cache.pop(name, None)  # read again when next asked
            self._appended.pop(name, None)
            self._writers.pop(name, None)
            return commit_with_token(open_table(uri, self.storage_options), WRITE_KEY, token, before)

        retrying(f"appending to {uri}", attempt, self.retry, landed=landed)
        if faulted:
            return
        ours = [r for r in data.to_pylist() if r["pipeline"] == self.pipeline]
        if cached is None:
            appended, commits = self._appended.get(name, ([], 0))
            self._appended[name] = (appended + ours, commits + 1)
        elif cached.table.version() == cached.version + 1:
            # No other commit came between the last read and this append: the table is what was
            # read plus these rows.
            cached.rows.extend(ours)
            cached.version += 1

    def _writer(self, name: str) -> DeltaTable | None:
        """The handle appends to control table ``name`` go through once this store appended to it
        by URI (opened then, kept); None before: a table appended to once needs no handle."""
        if name not in self._writers and name in self._appended:
            t = open_table(f"{self.root}/{name}", self.storage_options)
            if t is not None:
                self._writers[name] = t
        return self._writers.get(name)

    def load_plans(self) -> dict[str, list[Chunk]]:
        """Stored chunk plans by table (a table planned again after a reset: its latest plan)."""
        rows = self._read("snapshot_plan")
        latest: dict[str, object] = {}
        for r in rows:
            latest[r["table"]] = max(latest.get(r["table"], r["planned_at"]), r["planned_at"])
        plans: dict[str, list[Chunk]] = {}
        for r in sorted((r for r in rows if r["planned_at"] == latest[r["table"]]),
                        key=lambda r: (r["table"], r["chunk_index"])):
            b = json.loads(r["bounds"])
            plans.setdefault(r["table"], []).append(
                Chunk(r["table"], r["chunk_index"], r["chunk_key"], decode_value(b["lo"]), decode_value(b["hi"])))
        return plans

    def save_plan(self, chunks: list[Chunk]) -> None:
        """Record the chunk plans of tables (``chunks`` of one or more tables), in one commit,
        before any chunk of them is read."""
        now = dt.datetime.now(dt.UTC)
        self._append("snapshot_plan", [
            {"pipeline": self.pipeline, "table": c.table, "chunk_index": c.index, "chunk_key": c.key,
             "bounds": c.to_json(), "planned_at": now} for c in chunks], PLAN_SCHEMA)

    def completed_chunks(self, table: str, data_table) -> dict[int, ChunkRecord]:
        """Completed chunks of ``table`` by index: the mirror table united with the commits of
        its data table (None when it has none yet), both since the table's last snapshot reset."""
        return self.completed_in(table, snapshot_commits(data_table) if data_table is not None else None)

    def completed_in(self, table: str, commits: SnapshotCommits | None) -> dict[int, ChunkRecord]:
        """:meth:`completed_chunks` with the data table's commits already read."""
        return self.completed_of({table: commits})[table]

    def completed_of(self, commits: dict[str, SnapshotCommits | None]) -> dict[str, dict[int, ChunkRecord]]:
        """:meth:`completed_in` of each table of ``commits`` (table → its data table's commits), the
        mirror read once for all: per table it would be read and scanned whole once per table."""
        mirrored: dict[str, list[ChunkRecord]] = {}
        for r in self.chunk_records():
            mirrored.setdefault(r.table, []).append(r)
        out = {}
        for table, c in commits.items():
            reset = c.resets.get(table, -1) if c else -1
            done = {r.chunk_index: r for r in mirrored.get(table, ())
                    if (r.delta_version if r.delta_version is not None else -1) > reset}
            for r in c.records if c else ():
                if r.pipeline == self.pipeline and r.table == table and r.delta_version > reset:
                    done.setdefault(r.chunk_index, r)
            out[table] = done
        return out

    def chunk_records(self) -> list[ChunkRecord]:
        """Records in the ``snapshot_chunks`` mirror for this pipeline."""
        rows = self._read("snapshot_chunks")
        read = self._cache.get("snapshot_chunks")
        if self._chunk_records[0] is not read:  # read anew: parse every row again
            self._chunk_records = (read, [])
        parsed = self._chunk_records[1]
        # The same read only grows (rows this store appended): parse just the rows new to it.
        parsed.extend(ChunkRecord.from_row(r) for r in rows[len(parsed):])
        return list(parsed)

    def record_chunks(self, records: list[ChunkRecord]) -> None:
        """Mirror chunk records (already committed with their data) into ``snapshot_chunks``."""
        self._append("snapshot_chunks", [r.to_row() for r in records], CHUNKS_SCHEMA)

    def schema_history(self) -> list[HistoryEntry]:
        """Every recorded schema change of this pipeline, in binlog order."""
        entries = [_entry(r) for r in self._read("schema_history")]
        return sorted(entries, key=lambda e: e.order)

    def recorded_schemas(self) -> dict[str, TableSchema]:
        """Each table's source schema as the schema history recorded it last (baselines and applied
        changes), by name."""
        return {e.table: e.schema for e in self.schema_history()
                if e.status in (Status.BASELINE, Status.APPLIED) and e.schema is not None}

    def record_schema(self, *entries: HistoryEntry) -> None:
        """Append schema-history entries, in one commit (cdc_core/schema/history.py says what each
        status means)."""
        now = dt.datetime.now(dt.UTC)
        self._append("schema_history", [{
            "pipeline": self.pipeline, "table": e.table, "file": e.position.file, "pos": e.position.pos,
            "change_index": e.index, "kind": e.kind, "description": e.description, "ddl": e.ddl,
            "schema_json": e.schema.to_json() if e.schema else None, "status": str(e.status),
            "detail": e.detail, "held_ms": e.held_ms, "needs_backfill": e.needs_backfill,
            "recorded_at": e.recorded_at or now, "base": e.position.base} for e in entries], HISTORY_SCHEMA)

    def backfills(self) -> list[BackfillRequest]:
        """Every backfill request of this pipeline in its current state, oldest first
        (cdc_core/chunks/incremental.py: ``latest_requests``)."""
        return latest_requests(BackfillRequest.from_row(r) for r in self._read("backfill_requests"))

    def save_backfill(self, *requests: BackfillRequest) -> None:
        """Append backfill requests' new states, in one commit (the stream and the CLI both write here)."""
        self._append("backfill_requests", [r.to_row(self.pipeline) for r in requests], BACKFILL_SCHEMA)

    def record_reconcile(self, rows: list[dict]) -> None:
        """Append reconcile results, one row per table (pipelines/reconcile/checksums.py:
        ``reconcile_record``), in one commit."""
        self._append("reconcile_runs", rows, RECONCILE_SCHEMA)

    def latest_reconcile(self) -> dict[str, dict]:
        """The latest reconcile result of each table (by ``started_at``), ``mismatches`` and
        ``excluded_columns`` decoded from their JSON."""
        latest: dict[str, dict] = {}
        for r in self._read("reconcile_runs"):
            if r["table"] not in latest or r["started_at"] >= latest[r["table"]]["started_at"]:
                latest[r["table"]] = r
        return {t: {**r, "mismatches": json.loads(r["mismatches"] or "[]"),
                    "excluded_columns": json.loads(r["excluded_columns"] or "{}")} for t, r in latest.items()}

    def maintenance_requests(self) -> list[dict]:
        """Every state change of this pipeline's maintenance requests (rows, oldest first by ``seq``)."""
        return sorted(self._read("maintenance_requests"), key=lambda r: r["seq"])

    def save_maintenance_request(self, row: dict) -> None:
        """Append a maintenance request's new state (``binlake maintain`` and the stream both write here)."""
        self._append("maintenance_requests", [{**row, "pipeline": self.pipeline}], MAINTENANCE_REQUEST_SCHEMA)

    def record_maintenance(self, rows: list[dict]) -> None:
        """Append maintenance runs (pipelines/lake/maintenance/: one row per compaction or vacuum of a
        table), in one commit; past ``MAINTENANCE_RUNS_COMPACT_FILES`` files the table is rewritten
        as each table's latest run of each kind."""
        rows = [{**r, "pipeline": self.pipeline} for r in rows]
        self._read("maintenance_runs")  # a handle kept (read once, then only checked)
        cached = self._cache.get("maintenance_runs")
        if cached is None or len(cached.table.file_uris()) < MAINTENANCE_RUNS_COMPACT_FILES:
            self._append("maintenance_runs", rows, MAINTENANCE_RUNS_SCHEMA)
            return
        t = cached.table
        latest: dict[tuple, dict] = {}
        for r in t.to_pyarrow_table().to_pylist() + rows:
            latest[(r["pipeline"], r["table"], r["kind"])] = r
        write_deltalake(t, pa.Table.from_pylist(sorted(latest.values(), key=lambda r: r["at"]),
                                                schema=MAINTENANCE_RUNS_SCHEMA),
                        mode="overwrite", schema_mode="overwrite", post_commithook_properties=post_commit_hooks(t))
        self._cache.pop("maintenance_runs", None)

    def latest_maintenance(self) -> dict[tuple[str, str], dict]:
        """The latest maintenance run of each (table, kind) of this pipeline."""
        latest: dict[tuple[str, str], dict] = {}
        for r in self._read("maintenance_runs"):
            if (r["table"], r["kind"]) not in latest or r["at"] >= latest[(r["table"], r["kind"])]["at"]:
                latest[(r["table"], r["kind"])] = r
        return latest

    def checkpoint(self) -> Checkpoint | None:
        """The latest stream checkpoint, or None before the stream first committed."""
        rows = self._read("stream_checkpoint")
        if not rows:
            return None
        # The last written (see the module invariants); rows of an older binlake have no seq.
        r = max(rows, key=lambda r: (r.get("seq") or -1, r["committed_at"]))
        if r.get("offset"):
            offset = StreamOffset.from_json(r["offset"])
        else:  # written by a binlake without failover
            offset = StreamOffset(BinlogPosition(r["resume_file"], r["resume_pos"]),
                                  BinlogPosition(r["applied_file"], r["applied_pos"]), r["gtid"], r["event_time"] or 0)
        return Checkpoint(offset, r["state"], r["rows_applied"] or 0, r["committed_at"], r.get("seq") or 0)

    def position_base(self) -> int:
        """The base of the pipeline's positions on the source now: the checkpoint's (0 before
        the stream first committed, or before any failover)."""
        cp = self.checkpoint()
        return cp.offset.applied.base if cp else 0

    def save_checkpoint(self, offset: StreamOffset, state: str, rows_applied: int) -> None:
        """Append a checkpoint (after every table of a batch is committed)."""
        looked = self._checkpoint_seq is None  # the table was just looked for (and kept if found)
        if looked:
            last = self.checkpoint()
            self._checkpoint_seq = last.seq if last else 0
        self._checkpoint_seq += 1
        row = {"pipeline": self.pipeline, "state": state, "resume_file": offset.resume.file,
               "resume_pos": offset.resume.pos, "applied_file": offset.applied.file,
               "applied_pos": offset.applied.pos, "gtid": offset.gtid, "event_time": offset.event_time,
               "rows_applied": rows_applied, "committed_at": dt.datetime.now(dt.UTC), "seq": self._checkpoint_seq,
               "offset": offset.to_json()}
        # One handle kept (opened afresh once worn): a checkpoint per batch must not replay the table's log
        # each time. It is the one the checkpoint was read through, if any: the table is not opened twice.
        self._renew("stream_checkpoint")
        if self._checkpoints is None:
            cached = self._cache.get("stream_checkpoint")
            self._checkpoints = cached.table if cached else self._writer("stream_checkpoint") or (
                None if looked else open_table(f"{self.root}/stream_checkpoint", self.storage_options))
        t = self._checkpoints
        if t is None:
            self._append("stream_checkpoint", [row], CHECKPOINT_SCHEMA)
            return
        retrying("writing the stream checkpoint", lambda: self._write_checkpoint(t, row), self.retry)

    def _write_checkpoint(self, t: DeltaTable, row: dict) -> None:
        hooks = post_commit_hooks(t)  # a commit per batch: the log cleanup's full listing only at checkpoints
        # An append needs no current handle (a write leaves it at the version it committed, and delta-rs
        # commits an append on top of another writer's): no log read per batch.
        if len(t.file_uris()) >= CHECKPOINT_COMPACT_ROWS:
            t.update_incremental()  # the rewrite keeps other pipelines' rows: as they are now
            others = [r for r in t.to_pyarrow_table().to_pylist() if r["pipeline"] != self.pipeline]
            write_deltalake(t, pa.Table.from_pylist(others + [row], schema=CHECKPOINT_SCHEMA), mode="overwrite",
                            schema_mode="overwrite", post_commithook_properties=hooks)
        else:
            write_deltalake(t, pa.Table.from_pylist([row], schema=CHECKPOINT_SCHEMA), mode="append",
                            schema_mode="merge", post_commithook_properties=hooks)


@dataclass
class _Read:
    """A control table's rows of this pipeline as of ``version`` of the open ``table``."""

    table: DeltaTable
    version: int
    rows: list[dict]


@dataclass(frozen=True)
class Checkpoint:
    """The pipeline's stream checkpoint: every change through ``offset.applied`` is in Delta."""

    offset: StreamOffset
    state: str
    rows_applied: int
    committed_at: dt.datetime
    seq: int = 0


def _entry(r: dict) -> HistoryEntry:
    at = BinlogPosition(r["file"], r["pos"], r.get("base") or 0)
    return HistoryEntry(r["table"], at, r["change_index"], r["kind"],
                        Status(r["status"]), r["description"] or "", r["ddl"] or "",
                        TableSchema.from_json(r["schema_json"]) if r["schema_json"] else None, r["detail"] or "",
                        r["held_ms"], bool(r.get("needs_backfill")), r["recorded_at"])
