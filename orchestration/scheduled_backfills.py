"""Scheduled backfills: each entry of the config's ``dagster.backfills`` is the schedule
``binlake_backfill_<name>``, which launches the online backfill job ``binlake_backfill``
(the whole tables, or keys in ``[from_key, to_key)``) or, with ``repair_only``, the job
``binlake_repair`` (reconcile, backfill only the chunks that differ) for the captured
tables its regexes select on the source when it ticks. Either run requests its backfills
and waits while the running stream job does them (orchestration/backfill.py): the stream
stays the pipeline's only writer.

Invariants (tests/test_dagster_schedules.py, the real daemon ticking them):
- The schedule's name is ``binlake_backfill_<name>``; it is stopped unless ``running: true``.
- A regex that selects no table on the source (the tables it named are gone, or it never
  matched one) fails the tick, naming each such regex and table; nothing is launched.
- While a run of the schedule is queued, starting, running or cancelling, its ticks skip:
  one run of a scheduled backfill at a time.
"""

from __future__ import annotations

from dagster import (
    DefaultScheduleStatus,
    RunRequest,
    RunsFilter,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from cdc_core.config import BinlakeConfig, ScheduledBackfillConfig
from orchestration.backfill import backfill_job, repair_job
from orchestration.stream import ACTIVE
from pipelines.backfill.requests import select_tables
from resources.binlake import BinlakeResource

SCHEDULE_PREFIX = "binlake_backfill_"
SCHEDULED_TAG = "binlake/scheduled_backfill"


class ScheduledBackfillError(Exception):
    """A tick that cannot launch its backfill; the message names the regexes and tables."""


def run_config(entry: ScheduledBackfillConfig, tables: list[str]) -> dict:
    """The run config of the job ``entry`` launches for ``tables``."""
    if entry.repair_only:
        return {"ops": {"repair_chunks": {"config": {"tables": tables}}}}
    bounds = {k: v for k, v in (("from_key", entry.from_key), ("to_key", entry.to_key)) if v is not None}
    return {"ops": {"backfill_table": {"config": {"tables": [{"table": t, **bounds} for t in tables]}}}}


def backfill_schedule(entry: ScheduledBackfillConfig) -> ScheduleDefinition:
    """The schedule of one ``dagster.backfills`` entry."""
    name = SCHEDULE_PREFIX + entry.name
    keys = f"keys [{entry.from_key or '-'}, {entry.to_key or '-'}) of " if entry.from_key or entry.to_key else ""
    what = "reconcile and repair the differing chunks of " if entry.repair_only else f"online backfill of {keys}"

    @schedule(name=name, cron_schedule=entry.cron, job=repair_job if entry.repair_only else backfill_job,
              execution_timezone=entry.timezone,
              default_status=DefaultScheduleStatus.RUNNING if entry.running else DefaultScheduleStatus.STOPPED,
              description=f"Scheduled backfill {entry.name!r} (dagster.backfills): {what}the captured tables "
                          f"matching {', '.join(entry.tables)}, by the running stream")
    def _tick(context: ScheduleEvaluationContext, binlake: BinlakeResource):
        active = context.instance.get_runs(RunsFilter(tags={"dagster/schedule_name": name}, statuses=ACTIVE),
                                           limit=1)
        if active:
            return SkipReason(f"run {active[0].run_id[:8]} of this schedule is {active[0].status.value.lower()}: "
                              "one scheduled backfill run at a time")
        cfg = binlake.load()
        selection = select_tables(cfg, entry.tables, binlake.tables(cfg))
        if selection.unmatched:
            raise ScheduledBackfillError(
                f"{name}: nothing launched: " + "; ".join(f"tables {p!r}: {why}"
                                                          for p, why in selection.unmatched.items())
                + " (change dagster.backfills, or stop the schedule)")
        return RunRequest(run_config=run_config(entry, selection.tables),
                          tags={SCHEDULED_TAG: entry.name, "binlake/tables": ", ".join(selection.tables)[:200]})

    return _tick


def backfill_schedules(cfg: BinlakeConfig) -> list[ScheduleDefinition]:
    """A schedule per ``dagster.backfills`` entry of ``cfg``."""
    return [backfill_schedule(b) for b in cfg.dagster.backfills]
