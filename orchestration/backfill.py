"""The online backfill from Dagster: the job ``binlake_backfill`` requests a backfill of one
table (optionally a key range of its chunk key) and waits while the stream job does it
(the stream stays the pipeline's only writer; cdc_core/backfill.py). Launch it from the
Launchpad, or put a schedule on it with run config, e.g.::

    ScheduleDefinition(job=backfill_job, cron_schedule="0 3 * * 0",
                       run_config={"ops": {"backfill_table": {"config": {"table": "shop.orders"}}}})

Tests: tests/test_dagster_stream.py.
"""

import time

from dagster import Config, Failure, MetadataValue, OpExecutionContext, Output, in_process_executor, job, op

from cdc_core.backfill import BackfillState
from pipelines.backfill_requests import request_backfill, wait_for
from resources.binlake import BinlakeResource

BACKFILL_JOB = "binlake_backfill"


class BackfillRunConfig(Config):
    """What to backfill: a captured table ``db.table``, optionally keys in ``[from_key, to_key)``."""

    table: str
    from_key: str | None = None
    to_key: str | None = None
    timeout_seconds: float = 6 * 3600.0


@op(description="Request an online backfill of a table and wait while the stream job does it")
def backfill_table(context: OpExecutionContext, config: BackfillRunConfig, binlake: BinlakeResource):
    cfg = binlake.load()
    req = request_backfill(cfg, config.table, config.from_key, config.to_key)
    context.log.info(f"backfill {req.id} of {req.table} ({req.describe_range()}) requested; the stream job does it")
    deadline = time.monotonic() + config.timeout_seconds
    while not req.state.terminal and req.state != BackfillState.PAUSED:
        if time.monotonic() >= deadline:
            raise Failure(f"backfill {req.id} of {req.table} not done after {config.timeout_seconds:.0f} s: "
                          f"{req.progress()} (is the binlake_stream job running?)")
        req, = wait_for(cfg, [req.id], lambda _: None, seconds=30)
        context.log.info(f"backfill {req.id} of {req.table}: {req.progress()}")
    if req.state != BackfillState.DONE:  # failed, cancelled, or paused (`binlake backfill --resume ID`)
        raise Failure(f"backfill {req.id} of {req.table} {req.state}: {req.detail}")
    yield Output(None, metadata={"binlake/backfill_id": req.id, "binlake/table": req.table,
                                 "binlake/range": req.describe_range(), "binlake/chunks": len(req.chunks),
                                 "binlake/rows": MetadataValue.int(req.rows)})


@job(name=BACKFILL_JOB, executor_def=in_process_executor,
     description="Online backfill of one table (or key range) by the running stream; schedule it with run config")
def backfill_job():
    backfill_table()
