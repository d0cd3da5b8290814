"""Dagster resources: ``BinlakeResource`` does binlake's work for Dagster (as dagster-sling's
and dagster-dlt's resources do) and reports it as asset events; the Spark session comes
from dagster-pyspark's ``LazyPySparkResource``.

Invariants (tests/test_dagster_snapshot.py, tests/test_dagster_stream.py, tests/test_dagster_e2e.py):
- Under Dagster, schema changes go through the schema-change sensor (``external``) unless
  the config sets ``stream.schema_changes`` itself.
- A snapshot run materialises exactly the chunk partitions it was given: each when its
  rows are committed to Delta (a chunk already committed before is reported from its
  record), so a failed run leaves the finished chunks materialised.
- The stream runs in a worker thread; the op's thread turns a Terminate from the UI
  (``DagsterExecutionInterruptedError``) into the engine's clean stop (batch committed,
  checkpoint written, replication connection closed), tags the run
  ``binlake/stopped=terminate`` and ends without a failure. A stop signal from elsewhere
  (the code location server or ``dagster dev`` stopped, the run not being cancelled) stops
  it the same way without that tag, so the hand-off sensor starts the next stream run once
  Dagster is back (tests/test_dagster_postgres.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time

from dagster import (
    AssetMaterialization,
    ConfigurableResource,
    DagsterExecutionInterruptedError,
    DagsterRunStatus,
    Failure,
    OpExecutionContext,
)
from dagster_pyspark import LazyPySparkResource

from cdc_core.chunks.record import ChunkRecord
from cdc_core.config import BinlakeConfig, load_config
from cdc_core.lifecycle import State
from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.schema.table import TableSchema
from pipelines.lake.control_store import ControlStore
from pipelines.source_catalog import SourceCatalog, current_tables, discover, lake_tables
from pipelines.spark.session import spark_settings
from resources.translator import asset_key, chunk_partition_key

log = logging.getLogger(__name__)

STOPPED_TAG = "binlake/stopped"


def config_path() -> str:
    """The config file the code location uses: ``BINLAKE_CONFIG`` or ./binlake.yaml."""
    return os.environ.get("BINLAKE_CONFIG", "binlake.yaml")


def for_dagster(cfg: BinlakeConfig) -> BinlakeConfig:
    """The config as Dagster runs it: schema changes ``external`` unless the file sets them."""
    if "schema_changes" in cfg.stream.model_fields_set:
        return cfg
    return cfg.model_copy(update={"stream": cfg.stream.model_copy(update={"schema_changes": "external"})})


def spark_resource(cfg: BinlakeConfig) -> LazyPySparkResource:
    """dagster-pyspark's lazy session with binlake's settings (the session starts in the first snapshot step)."""
    return LazyPySparkResource(spark_config=spark_settings(cfg.spark.master, cfg.spark.conf))


def _chunk_metadata(record: ChunkRecord) -> dict:
    """A chunk record as partition metadata (rows are unknown for a chunk read in a group on a non-integer key)."""
    metadata = {"dagster/row_count": record.rows, "binlake/chunk_index": record.chunk_index,
                "binlake/low_watermark": str(record.low_watermark),
                "binlake/high_watermark": str(record.high_watermark),
                "binlake/window_changes": record.window_changes,
                "binlake/delta_version": record.delta_version}
    return {k: v for k, v in metadata.items() if v is not None}


class BinlakeResource(ConfigurableResource):
    """One binlake pipeline: its config file and where its table catalog is kept."""

    config_path: str
    catalog_path: str | None = None  # the saved table catalog (refreshed by the stream when tables appear)

    def load(self) -> BinlakeConfig:
        """The pipeline config as Dagster runs it (see ``for_dagster``)."""
        return for_dagster(load_config(self.config_path))

    def catalog(self) -> SourceCatalog | None:
        return SourceCatalog.read(self.catalog_path)

    def tables(self, cfg: BinlakeConfig) -> dict[str, TableSchema]:
        """Captured tables by name: the catalog with what the lake recorded since."""
        return {t.qualified_name: t for t in current_tables(cfg, self.catalog())}

    def refresh_catalog(self, context: OpExecutionContext) -> SourceCatalog:
        """Discover the captured tables from the source and save them as the catalog."""
        cfg = self.load()
        catalog = discover(cfg)
        if self.catalog_path:
            catalog.write(self.catalog_path)
            context.log.info(f"table catalog saved to {self.catalog_path}: {', '.join(catalog.names) or 'no tables'}; "
                             "reload the code location to see new tables")
        return catalog

    # --- snapshot -----------------------------------------------------------------------------

    def snapshot_chunks(self, context: OpExecutionContext, pyspark: LazyPySparkResource, table: str,
                        chunks: list[int]):
        """Snapshot chunks ``chunks`` of ``table`` (on Spark, whose lazy session starts only if
        ``source.snapshot.runner`` puts groups on it), materialising each chunk partition as its
        rows are committed; returns the table's SnapshotSummary."""
        from pipelines.lake.tables import open_table, table_uri
        from pipelines.snapshot.driver import SnapshotJob
        from pipelines.spark.session import snapshot_on_spark

        cfg = self.load()
        spark = pyspark.spark_session if snapshot_on_spark(cfg) else None
        reported: set[int] = set()

        def progress(done: int, total: int, rows: int) -> None:
            context.log.info(f"snapshot {table}: {done}/{total} chunks read, {rows:,} rows")

        def on_commit(name: str, records: list[ChunkRecord]) -> None:
            for r in records:
                reported.add(r.chunk_index)
                context.log_event(AssetMaterialization(
                    asset_key=asset_key(name), partition=chunk_partition_key(r.chunk_index),
                    description="snapshot chunk committed", metadata=_chunk_metadata(r)))

        summary = SnapshotJob(cfg, spark, progress, only={table}, chunks=set(chunks), on_commit=on_commit).run()
        earlier = [i for i in chunks if i not in reported]
        if earlier:  # committed by an earlier run: report them from their records
            from cdc_core.routes import Router

            dt = open_table(table_uri(cfg.sink.path, Router(cfg.routes).sink(table)), cfg.sink.storage_options)
            done = ControlStore.of(cfg).completed_chunks(table, dt)
            for i in earlier:
                if i in done:
                    context.log_event(AssetMaterialization(
                        asset_key=asset_key(table), partition=chunk_partition_key(i),
                        description="snapshot chunk already in Delta", metadata=_chunk_metadata(done[i])))
        (s,) = summary.tables
        return s

    # --- stream -------------------------------------------------------------------------------

    def stream(self, context: OpExecutionContext, *, continuous: bool):
        """Run the binlog stream (bounded: up to the binlog end as of now, at most
        ``dagster.stream.max_run_seconds``; continuous: until terminated), recording each
        committed micro-batch's offsets as asset materializations; returns the StreamSummary."""
        cfg = self.load()
        with self._sole_writer(context, cfg):
            return self._stream(context, cfg, continuous)

    @staticmethod
    @contextlib.contextmanager
    def _sole_writer(context: OpExecutionContext, cfg: BinlakeConfig):
        """The pipeline's writer lock (pipelines/lake/writer_lock.py), held while the block runs, as the
        CLI's writing commands hold it: another writer holding it (``binlake stream``, ``run``,
        ``snapshot``…) fails this run at once, named; while this run streams, they refuse."""
        from pipelines.lake.writer_lock import WriterLockError, writer_lock

        lock = writer_lock(cfg.sink.path, cfg.pipeline.name, f"dagster run {context.run_id} ({context.job_name})",
                           cfg.sink.storage_options)
        try:
            lock.acquire()
        except WriterLockError as e:
            raise Failure(description=str(e)) from None
        try:
            yield
        finally:
            lock.release()

    def _stream(self, context: OpExecutionContext, cfg: BinlakeConfig, continuous: bool):
        from pipelines.stream import StreamEngine
        from resources.materializations import OffsetRecorder

        tables = self.tables(cfg)
        recorder = OffsetRecorder(cfg, tables)
        events: queue.SimpleQueue = queue.SimpleQueue()  # engine thread → op thread (Dagster logging stays here)
        engine = StreamEngine(cfg, until_now=not continuous,
                              max_seconds=None if continuous else cfg.dagster.stream.max_run_seconds,
                              progress=lambda _summary, offset: events.put(offset), on_commit=events.put)
        outcome: dict = {}
        # Not Thread.join: an interrupt inside join() can mark a running thread as stopped (bpo-45274's fix).
        done = threading.Event()

        def run() -> None:
            try:
                outcome["summary"] = engine.run()
            except BaseException as e:  # noqa: BLE001 - re-raised in the op's thread
                outcome["error"] = e
            finally:
                done.set()

        worker = threading.Thread(target=run, name="binlake-stream", daemon=True)
        worker.start()
        context.log.info(f"stream started ({'continuous' if continuous else 'bounded'}; schema changes "
                         f"{cfg.stream.schema_changes}) for {len(tables)} tables")
        terminated = False
        store, idle_checked = ControlStore.of(cfg), time.monotonic()
        while not done.is_set() or not events.empty():
            try:
                done.wait(0.5)
                if (engine.life.state == State.STREAMING
                        and time.monotonic() - idle_checked >= cfg.dagster.idle_offset_seconds):
                    # A stream with nothing to read writes no checkpoint: its idle tables' offsets come from
                    # the last one, at the same bounded rate.
                    idle_checked = time.monotonic()
                    checkpoint = store.checkpoint()
                    if checkpoint is not None:
                        events.put(checkpoint.offset)
                self._record(events, recorder, context)
            except (DagsterExecutionInterruptedError, KeyboardInterrupt):
                if not terminated:
                    terminated = True
                    context.log.info("stop requested (Terminate, or a stop signal to the run's process): "
                                     "committing the batch read so far, writing the checkpoint and closing the "
                                     "replication connection")
                engine.request_stop()
        if "error" in outcome:
            e = outcome["error"]
            raise Failure(description=f"binlake stream stopped: {type(e).__name__}: {e}") from e
        summary = outcome["summary"]
        if terminated and context.instance.get_run_by_id(context.run_id).status == DagsterRunStatus.CANCELING:
            # Terminated from the UI (Dagster marks the run cancelling first): not relaunched.
            context.instance.add_run_tags(context.run_id, {STOPPED_TAG: "terminate"})
        self._refresh_if_new_tables(context, cfg, tables)
        context.log.info(f"stream stopped cleanly ({summary.stop_reason}): {summary.changes:,} changes in "
                         f"{summary.batches} batches, checkpoint at {summary.end}")
        return summary

    @staticmethod
    def _record(events: queue.SimpleQueue, recorder, context: OpExecutionContext) -> None:
        """Log what the engine reported: commits first, then one heartbeat check at the latest checkpoint."""
        commits, checkpoint = [], None
        while not events.empty():
            item = events.get()
            if isinstance(item, StreamOffset):
                checkpoint = item
            else:
                commits.extend(item)
        for m in recorder.on_commits(commits) + (recorder.on_checkpoint(checkpoint) if checkpoint else []):
            context.log_event(m)

    def _refresh_if_new_tables(self, context: OpExecutionContext, cfg: BinlakeConfig,
                               known: dict[str, TableSchema]) -> None:
        catalog = self.catalog()
        new = sorted(set(lake_tables(cfg)) - set(catalog.names if catalog else known))
        if new:
            context.log.info(f"the stream captured new tables: {', '.join(new)}")
            try:
                self.refresh_catalog(context)
            except Exception as e:  # noqa: BLE001 - the stream's work is done; the catalog is refreshed later
                context.log.warning(f"table catalog not refreshed (source not reachable?): {e}")
