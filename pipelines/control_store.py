"""Control state under ``<sink>/_binlake/`` in Delta tables: snapshot chunk plans and
completed chunks with their watermarks.

Invariant: a chunk is complete iff its rows are committed in its data table; the
data commit itself carries the chunk record (commit metadata), and the
``snapshot_chunks`` table mirrors it for readers. Recovery unions both, so a
crash between the data commit and the mirror loses nothing.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

import pyarrow as pa
from deltalake import write_deltalake

from cdc_core.chunking import Chunk, decode_value
from cdc_core.offsets import StreamOffset
from cdc_core.positions import BinlogPosition
from pipelines.delta_sink import committed_chunk_records, open_table, stream_post_commit

PLAN_SCHEMA = pa.schema([
    ("pipeline", pa.string()), ("table", pa.string()), ("chunk_index", pa.int32()), ("chunk_key", pa.string()),
    ("bounds", pa.string()), ("planned_at", pa.timestamp("us", tz="UTC")),
])
CHECKPOINT_SCHEMA = pa.schema([
    ("pipeline", pa.string()), ("state", pa.string()), ("resume_file", pa.string()), ("resume_pos", pa.int64()),
    ("applied_file", pa.string()), ("applied_pos", pa.int64()), ("gtid", pa.string()), ("event_time", pa.int64()),
    ("rows_applied", pa.int64()), ("committed_at", pa.timestamp("us", tz="UTC")),
])
# The checkpoint table gains one small file per batch; past this many live rows it is
# rewritten as its latest row (one atomic overwrite), so reading it stays cheap.
CHECKPOINT_COMPACT_ROWS = 500
HISTORY_SCHEMA = pa.schema([
    ("pipeline", pa.string()), ("table", pa.string()), ("file", pa.string()), ("pos", pa.int64()),
    ("change_index", pa.int32()), ("kind", pa.string()), ("description", pa.string()), ("ddl", pa.string()),
    ("schema_json", pa.string()), ("status", pa.string()), ("detail", pa.string()), ("held_ms", pa.float64()),
    ("recorded_at", pa.timestamp("us", tz="UTC")),
])
CHUNKS_SCHEMA = pa.schema([
    ("pipeline", pa.string()), ("table", pa.string()), ("chunk_index", pa.int32()), ("rows", pa.int64()),
    ("lw_file", pa.string()), ("lw_pos", pa.int64()), ("hw_file", pa.string()), ("hw_pos", pa.int64()),
    ("window_changes", pa.int64()), ("delta_version", pa.int64()), ("completed_at", pa.timestamp("us", tz="UTC")),
])


class ControlStore:
    """Snapshot plans and progress of one pipeline."""

    def __init__(self, sink_path: str, pipeline: str, storage_options: dict | None = None):
        self.root = f"{sink_path.rstrip('/')}/_binlake"
        self.pipeline = pipeline
        self.storage_options = storage_options or None
        self._checkpoints = None  # the stream_checkpoint table, once it exists

    @classmethod
    def of(cls, cfg) -> ControlStore:
        """The control store of a pipeline config (``cdc_core.config.BinlakeConfig``)."""
        return cls(cfg.sink.path, cfg.pipeline.name, cfg.sink.storage_options)

    def _read(self, name: str) -> list[dict]:
        t = open_table(f"{self.root}/{name}", self.storage_options)
        if t is None:
            return []
        return [r for r in t.to_pyarrow_table().to_pylist() if r["pipeline"] == self.pipeline]

    def _append(self, name: str, rows: list[dict], schema: pa.Schema) -> None:
        write_deltalake(f"{self.root}/{name}", pa.Table.from_pylist(rows, schema=schema), mode="append",
                        storage_options=self.storage_options)

    def load_plans(self) -> dict[str, list[Chunk]]:
        """Stored chunk plans by table."""
        plans: dict[str, list[Chunk]] = {}
        for r in sorted(self._read("snapshot_plan"), key=lambda r: (r["table"], r["chunk_index"])):
            b = json.loads(r["bounds"])
            plans.setdefault(r["table"], []).append(
                Chunk(r["table"], r["chunk_index"], r["chunk_key"], decode_value(b["lo"]), decode_value(b["hi"])))
        return plans

    def save_plan(self, chunks: list[Chunk]) -> None:
        """Record a table's chunk plan before any chunk of it is read."""
        now = dt.datetime.now(dt.UTC)
        self._append("snapshot_plan", [
            {"pipeline": self.pipeline, "table": c.table, "chunk_index": c.index, "chunk_key": c.key,
             "bounds": c.to_json(), "planned_at": now} for c in chunks], PLAN_SCHEMA)

    def completed_chunks(self, table: str, data_table) -> dict[int, dict]:
        """Completed chunks of ``table`` by index: the mirror table united with the data commits."""
        done = {r["chunk_index"]: r for r in self.chunk_records() if r["table"] == table}
        if data_table is not None:
            for r in committed_chunk_records(data_table):
                if r.get("pipeline") == self.pipeline and r["table"] == table:
                    done.setdefault(r["chunk_index"], r)
        return done

    def chunk_records(self) -> list[dict]:
        """Rows of the ``snapshot_chunks`` mirror for this pipeline."""
        return self._read("snapshot_chunks")

    def record_chunks(self, records: list[dict]) -> None:
        """Mirror chunk records (already committed with their data) into ``snapshot_chunks``."""
        self._append("snapshot_chunks", records, CHUNKS_SCHEMA)

    def schema_history(self) -> list[dict]:
        """Every recorded schema change of this pipeline, in binlog order."""
        rows = self._read("schema_history")
        return sorted(rows, key=lambda r: (BinlogPosition(r["file"], r["pos"]), r["change_index"], r["recorded_at"]))

    def record_schema(self, table: str, pos: BinlogPosition, index: int, kind: str, *, status: str,
                      description: str = "", ddl: str = "", schema_json: str | None = None, detail: str = "",
                      held_ms: float | None = None) -> None:
        """Append a schema-history entry: status is baseline, pending, applied, skipped, recorded
        (known but not applied, e.g. needs a backfill), unparsed or failed."""
        self._append("schema_history", [{
            "pipeline": self.pipeline, "table": table, "file": pos.file, "pos": pos.pos, "change_index": index,
            "kind": kind, "description": description, "ddl": ddl, "schema_json": schema_json, "status": status,
            "detail": detail, "held_ms": held_ms, "recorded_at": dt.datetime.now(dt.UTC)}], HISTORY_SCHEMA)

    def checkpoint(self) -> Checkpoint | None:
        """The latest stream checkpoint, or None before the stream first committed."""
        rows = self._read("stream_checkpoint")
        if not rows:
            return None
        r = max(rows, key=lambda r: r["committed_at"])
        offset = StreamOffset(BinlogPosition(r["resume_file"], r["resume_pos"]),
                              BinlogPosition(r["applied_file"], r["applied_pos"]), r["gtid"], r["event_time"] or 0)
        return Checkpoint(offset, r["state"], r["rows_applied"] or 0, r["committed_at"])

    def save_checkpoint(self, offset: StreamOffset, state: str, rows_applied: int) -> None:
        """Append a checkpoint (after every table of a batch is committed)."""
        row = {"pipeline": self.pipeline, "state": state, "resume_file": offset.resume.file,
               "resume_pos": offset.resume.pos, "applied_file": offset.applied.file,
               "applied_pos": offset.applied.pos, "gtid": offset.gtid, "event_time": offset.event_time,
               "rows_applied": rows_applied, "committed_at": dt.datetime.now(dt.UTC)}
        # One handle for the stream's life: a checkpoint per batch must not replay the table's log each time.
        t = self._checkpoints = self._checkpoints or open_table(f"{self.root}/stream_checkpoint", self.storage_options)
        if t is None:
            self._append("stream_checkpoint", [row], CHECKPOINT_SCHEMA)
            return
        t.update_incremental()
        hooks = stream_post_commit(t)  # a commit per batch: the log cleanup's full listing only at checkpoints
        if len(t.file_uris()) >= CHECKPOINT_COMPACT_ROWS:
            others = [r for r in t.to_pyarrow_table().to_pylist() if r["pipeline"] != self.pipeline]
            write_deltalake(t, pa.Table.from_pylist(others + [row], schema=CHECKPOINT_SCHEMA), mode="overwrite",
                            post_commithook_properties=hooks)
        else:
            write_deltalake(t, pa.Table.from_pylist([row], schema=CHECKPOINT_SCHEMA), mode="append",
                            post_commithook_properties=hooks)


@dataclass(frozen=True)
class Checkpoint:
    """The pipeline's stream checkpoint: every change through ``offset.applied`` is in Delta."""

    offset: StreamOffset
    state: str
    rows_applied: int
    committed_at: dt.datetime


def chunk_record(pipeline: str, chunk: Chunk, rows: int, lw: BinlogPosition, hw: BinlogPosition,
                 window_changes: int) -> dict:
    """The durable record of one completed chunk (delta_version filled in at commit)."""
    return {"pipeline": pipeline, "table": chunk.table, "chunk_index": chunk.index, "rows": rows,
            "lw_file": lw.file, "lw_pos": lw.pos, "hw_file": hw.file, "hw_pos": hw.pos,
            "window_changes": window_changes, "delta_version": None,
            "completed_at": dt.datetime.now(dt.UTC).isoformat()}
