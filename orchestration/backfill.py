"""The online backfill from Dagster. The stream stays the pipeline's only writer
(cdc_core/chunks/incremental.py): these jobs request backfills and wait while the stream job does them.

- ``binlake_backfill`` backfills a selection of tables in one launch, each whole or only a
  key range of its chunk key (config ``tables``: a list of ``{table, from_key, to_key}``; the
  one-table shorthand ``table``/``from_key``/``to_key`` of earlier launches still works).
  Every entry is checked before anything is requested (a table not captured, missing,
  routed or without a row key, a bound that is not a value of the key: the run fails naming
  each, and nothing is requested); then one durable request per entry, as ``binlake
  backfill`` stores it. The run logs each table's progress, fails naming the request as
  soon as one fails, is cancelled or paused, and records on each table's asset an
  observation with the request id, range, chunks, rows and duration. Launch it from the
  Launchpad, or put a schedule on it with run config, e.g.::

      ScheduleDefinition(job=backfill_job, cron_schedule="0 3 * * 0", run_config={"ops": {"backfill_table": {
          "config": {"tables": [{"table": "shop.orders", "from_key": "1000000"}, {"table": "shop.customers"}]}}}})

- ``binlake_repair`` repairs what reconciliation finds: it reconciles the tables (all, or
  ``tables``), backfills exactly the chunks that differ (``binlake reconcile --repair``) and,
  once they are done, records each table's ``checksum_parity`` check again
  (orchestration/checks.py), so the check a failed nightly reconciliation left red turns
  green on the asset once the repair is done.

Tests: tests/test_dagster_stream.py.
"""

import time

from dagster import (
    AssetCheckEvaluation,
    AssetObservation,
    Config,
    Failure,
    MetadataValue,
    OpExecutionContext,
    Output,
    TableColumn,
    TableRecord,
    TableSchema,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from cdc_core.chunks.incremental import BackfillRequest, BackfillState
from cdc_core.config import BinlakeConfig
from cdc_core.errors import BadInput
from orchestration.checks import REPAIR_JOB, ReconcileConfig, checksum_result
from pipelines.backfill.requests import request_backfills, request_repairs, wait_for
from resources.binlake import BinlakeResource
from resources.translator import asset_key

BACKFILL_JOB = "binlake_backfill"
DEFAULT_TIMEOUT = 6 * 3600.0
BACKFILLS_SCHEMA = TableSchema(columns=[
    TableColumn("table", "string"), TableColumn("range", "string"), TableColumn("backfill_id", "string"),
    TableColumn("chunks", "int"), TableColumn("rows", "int"), TableColumn("seconds", "float")])


class TableBackfill(Config):
    """One table to backfill: a captured table ``db.table``, optionally only keys in
    ``[from_key, to_key)`` of its chunk key (either bound may be left out)."""

    table: str = Field(description="A captured table, db.table")
    from_key: str | None = Field(default=None, description="Lowest chunk-key value backfilled (unset: the first)")
    to_key: str | None = Field(default=None, description="Chunk-key value where the range ends, excluded "
                                                         "(unset: the last)")


class BackfillRunConfig(Config):
    """What to backfill: ``tables``, each with its own optional key range; ``table`` with
    ``from_key``/``to_key`` is the one-table shorthand (added to ``tables`` when both are given)."""

    # The descriptions are what the Launchpad's config schema shows.
    tables: list[TableBackfill] = Field(default=[], description="The tables to backfill, each whole or a key range")
    table: str | None = Field(default=None, description="One table to backfill (shorthand for one `tables` entry)")
    from_key: str | None = Field(default=None, description="With `table`: lowest chunk-key value backfilled")
    to_key: str | None = Field(default=None, description="With `table`: chunk-key value where the range ends, "
                                                         "excluded")
    timeout_seconds: float = Field(default=DEFAULT_TIMEOUT, description="Fail the run if the backfills are not "
                                                                        "done by then")

    def selection(self) -> list[TableBackfill]:
        """Every table to backfill, in the order given; a failure when there is none."""
        if self.table is None and (self.from_key is not None or self.to_key is not None):
            raise Failure("from_key/to_key without table: give each table's range in its `tables` entry")
        one = [TableBackfill(table=self.table, from_key=self.from_key, to_key=self.to_key)] if self.table else []
        if not self.tables and not one:
            raise Failure("nothing to backfill: list the tables in config `tables`, e.g. "
                          "tables: [{table: db.t}, {table: db.u, from_key: '1000', to_key: '2000'}]")
        return [*self.tables, *one]


class RepairRunConfig(ReconcileConfig):
    """What to reconcile and repair: captured tables ``db.table`` (empty: every captured table)."""

    tables: list[str] = []
    timeout_seconds: float = DEFAULT_TIMEOUT


def wait_done(context: OpExecutionContext, cfg: BinlakeConfig, reqs: list[BackfillRequest],
              timeout_seconds: float) -> list[BackfillRequest]:
    """Wait while the stream job does the backfills ``reqs``, logging each one's progress as it
    changes; their final states. Fails as soon as one is failed, cancelled or paused (naming
    it; the stream goes on with the others), or when they are not done in ``timeout_seconds``."""
    logged: dict[str, str] = {}

    def log_changes(current: list[BackfillRequest]) -> None:
        for r in current:
            if logged.get(r.id) != r.progress():
                logged[r.id] = r.progress()
                context.log.info(f"backfill {r.id} of {r.table} ({r.describe_range()}): {r.progress()}")

    def describe(rs: list[BackfillRequest]) -> str:
        return "; ".join(f"{r.id} of {r.table}: {r.progress()}" for r in rs)

    deadline = time.monotonic() + timeout_seconds
    while True:
        # Short rounds: wait_for returns once all are finished (or one is paused), and one failed
        # request must not be waited on until the others are done.
        reqs = wait_for(cfg, [r.id for r in reqs], log_changes, seconds=min(30.0, deadline - time.monotonic()))
        stopped = [r for r in reqs if r.state in (BackfillState.FAILED, BackfillState.CANCELLED,
                                                  BackfillState.PAUSED)]
        if stopped or all(r.state.terminal for r in reqs) or time.monotonic() >= deadline:
            break
    if stopped:  # paused: `binlake backfill --resume ID`
        others = [r for r in reqs if r not in stopped]
        raise Failure("; ".join(f"backfill {r.id} of {r.table} ({r.describe_range()}) {r.state}"
                                + (f": {r.detail}" if r.detail else "") for r in stopped)
                      + (f" (the stream goes on with the others: {describe(others)})" if others else ""))
    if not all(r.state == BackfillState.DONE for r in reqs):
        raise Failure(f"backfills not done after {timeout_seconds:.0f} s: {describe(reqs)} "
                      "(is the binlake_stream job running?)")
    return reqs


def backfill_metadata(req: BackfillRequest, seconds: float) -> dict:
    """What one finished backfill request did, as asset metadata."""
    return {"binlake/backfill_id": req.id, "binlake/table": req.table, "binlake/range": req.describe_range(),
            "binlake/chunks": len(req.chunks), "binlake/rows": MetadataValue.int(req.rows),
            "binlake/duration_seconds": MetadataValue.float(round(seconds, 1))}


@op(description="Request an online backfill of each selected table (or key range) and wait while the stream "
                "job does them")
def backfill_table(context: OpExecutionContext, config: BackfillRunConfig, binlake: BinlakeResource):
    cfg = binlake.load()
    try:
        requested = request_backfills(cfg, [(t.table, t.from_key, t.to_key) for t in config.selection()])
    except BadInput as e:
        raise Failure(f"nothing requested: {e}") from None
    for r in requested:
        context.log.info(f"backfill {r.id} of {r.table} ({r.describe_range()}) requested; the stream job does it")
    done = wait_done(context, cfg, requested, config.timeout_seconds)
    records = []
    for req, first in zip(done, requested):
        # Both times are the request's own rows (stored when requested, when the stream finished it).
        seconds = (req.updated_at - first.updated_at).total_seconds()
        context.log_event(AssetObservation(asset_key=asset_key(req.table), description="online backfill done",
                                           metadata=backfill_metadata(req, seconds)))
        records.append(TableRecord({"table": req.table, "range": req.describe_range(), "backfill_id": req.id,
                                    "chunks": len(req.chunks), "rows": req.rows, "seconds": round(seconds, 1)}))
    yield Output(None, metadata={"binlake/tables": ", ".join(dict.fromkeys(r.table for r in done)),
                                 "binlake/backfills": MetadataValue.table(records, BACKFILLS_SCHEMA),
                                 "binlake/chunks": sum(len(r.chunks) for r in done),
                                 "binlake/rows": MetadataValue.int(sum(r.rows for r in done))})


@job(name=BACKFILL_JOB, executor_def=in_process_executor,
     description="Online backfill of selected tables (each whole or a key range) by the running stream; config "
                 "`tables`; schedule it with run config")
def backfill_job():
    backfill_table()


@op(description="Reconcile tables, backfill exactly the chunks that differ (by the stream job), check them again")
def repair_chunks(context: OpExecutionContext, config: RepairRunConfig, binlake: BinlakeResource):
    cfg = binlake.load()
    found = config.reconcile(cfg, config.tables or None, context)
    differing = {t.table: len(t.mismatches) for t in found.tables if t.mismatches}
    reqs, refused = request_repairs(cfg, found)
    for table, why in refused.items():
        context.log.error(f"{table} cannot be repaired by a backfill: {why}")
    if reqs:
        context.log.info(f"backfills of {len(reqs)} differing chunks requested ("
                         + ", ".join(f"{t}: {n}" for t, n in differing.items()) + "); the stream job does them")
        reqs = wait_done(context, cfg, reqs, config.timeout_seconds)
        for r in config.reconcile(cfg, sorted(differing.keys() - refused.keys()), context).tables:
            result = checksum_result(r)
            context.log_event(AssetCheckEvaluation(asset_key=result.asset_key, check_name=result.check_name,
                                                   passed=result.passed, severity=result.severity,
                                                   description=result.description, metadata=result.metadata))
    else:
        context.log.info("every chunk is equal: nothing to repair")
    if refused:
        raise Failure("not repairable by a backfill: " + "; ".join(f"{t}: {why}" for t, why in refused.items()))
    yield Output(None, metadata={
        "binlake/tables_checked": len(found.tables), "binlake/differing_chunks": sum(differing.values()),
        "binlake/repaired": ", ".join(f"{t} ({n} chunks)" for t, n in differing.items()) or "nothing",
        "binlake/backfill_ids": ", ".join(r.id for r in reqs) or "none",
        "binlake/rows_backfilled": MetadataValue.int(sum(r.rows for r in reqs))})


@job(name=REPAIR_JOB, executor_def=in_process_executor,
     description="Repair what reconciliation finds: backfill exactly the differing chunks (by the running stream), "
                 "then record checksum_parity again")
def repair_job():
    repair_chunks()
