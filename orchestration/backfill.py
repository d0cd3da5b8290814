"""The online backfill from Dagster. The stream stays the pipeline's only writer
(cdc_core/backfill.py): these jobs request backfills and wait while the stream job does them.

- ``binlake_backfill`` backfills one table (optionally a key range of its chunk key). Launch
  it from the Launchpad, or put a schedule on it with run config, e.g.::

      ScheduleDefinition(job=backfill_job, cron_schedule="0 3 * * 0",
                         run_config={"ops": {"backfill_table": {"config": {"table": "shop.orders"}}}})

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
    Config,
    Failure,
    MetadataValue,
    OpExecutionContext,
    Output,
    in_process_executor,
    job,
    op,
)

from cdc_core.backfill import BackfillRequest, BackfillState
from cdc_core.config import BinlakeConfig
from orchestration.checks import REPAIR_JOB, ReconcileConfig, checksum_result
from pipelines.backfill_requests import request_backfill, request_repairs, wait_for
from resources.binlake import BinlakeResource

BACKFILL_JOB = "binlake_backfill"
DEFAULT_TIMEOUT = 6 * 3600.0


class BackfillRunConfig(Config):
    """What to backfill: a captured table ``db.table``, optionally keys in ``[from_key, to_key)``."""

    table: str
    from_key: str | None = None
    to_key: str | None = None
    timeout_seconds: float = DEFAULT_TIMEOUT


class RepairRunConfig(ReconcileConfig):
    """What to reconcile and repair: captured tables ``db.table`` (empty: every captured table)."""

    tables: list[str] = []
    timeout_seconds: float = DEFAULT_TIMEOUT


def wait_done(context: OpExecutionContext, cfg: BinlakeConfig, reqs: list[BackfillRequest],
              timeout_seconds: float) -> list[BackfillRequest]:
    """Wait while the stream job does the backfills ``reqs``; their final states. A failure
    names the request that did not finish (failed, cancelled, paused or timed out)."""
    deadline = time.monotonic() + timeout_seconds
    while not all(r.state.terminal for r in reqs) and not any(r.state == BackfillState.PAUSED for r in reqs):
        if time.monotonic() >= deadline:
            raise Failure("backfills not done after {:.0f} s: {} (is the binlake_stream job running?)".format(
                timeout_seconds, "; ".join(f"{r.id} of {r.table}: {r.progress()}" for r in reqs)))
        reqs = wait_for(cfg, [r.id for r in reqs], lambda _: None, seconds=30)
        for r in reqs:
            context.log.info(f"backfill {r.id} of {r.table} ({r.describe_range()}): {r.progress()}")
    for r in reqs:
        if r.state != BackfillState.DONE:  # failed, cancelled, or paused (`binlake backfill --resume ID`)
            raise Failure(f"backfill {r.id} of {r.table} {r.state}: {r.detail}")
    return reqs


@op(description="Request an online backfill of a table and wait while the stream job does it")
def backfill_table(context: OpExecutionContext, config: BackfillRunConfig, binlake: BinlakeResource):
    cfg = binlake.load()
    req = request_backfill(cfg, config.table, config.from_key, config.to_key)
    context.log.info(f"backfill {req.id} of {req.table} ({req.describe_range()}) requested; the stream job does it")
    req, = wait_done(context, cfg, [req], config.timeout_seconds)
    yield Output(None, metadata={"binlake/backfill_id": req.id, "binlake/table": req.table,
                                 "binlake/range": req.describe_range(), "binlake/chunks": len(req.chunks),
                                 "binlake/rows": MetadataValue.int(req.rows)})


@job(name=BACKFILL_JOB, executor_def=in_process_executor,
     description="Online backfill of one table (or key range) by the running stream; schedule it with run config")
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
