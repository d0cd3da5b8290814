"""The binlog stream job and the hand-off sensor that launches it.

Exactly one stream run at a time: the job's runs carry the tag ``binlake/stream=<pipeline>``,
limited to one in progress per value by the shipped ``dagster.yaml``
(``concurrency.runs.tag_concurrency_limits``), its op is in the pool ``binlake_stream``
(limit 1), and the sensor never requests a run while one is queued, starting, running
or being cancelled.

The sensor hands off once every captured table's snapshot is complete (startup modes
``initial``/``snapshot``; other modes need no snapshot). In bounded mode (the default)
each run drains the binlog up to its end as of the run's start and exits, and the sensor
launches the next; in continuous mode a run streams until terminated. A run stopped from
the UI (tag ``binlake/stopped=terminate``) or a failed run is not relaunched: a person
launches ``binlake_stream`` again. A run that failed without ever starting (its launch
failed: the code location server was down or shutting down, as during a deploy) streamed
nothing, so there is nothing to fix: it is launched again, at most every
``RELAUNCH_SECONDS``.

Tests: tests/test_dagster_sensors.py, tests/test_dagster_stream.py, tests/test_dagster_e2e.py.
"""


import time

from dagster import (
    Config,
    DagsterRunStatus,
    DefaultSensorStatus,
    OpExecutionContext,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SkipReason,
    in_process_executor,
    job,
    op,
    sensor,
)

from resources.binlake import STOPPED_TAG, BinlakeResource

STREAM_JOB = "binlake_stream"
STREAM_TAG = "binlake/stream"
RELAUNCH_SECONDS = 30.0  # after a stream run whose launch failed, before the next attempt
ACTIVE = [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.QUEUED, DagsterRunStatus.STARTING,
          DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]


class StreamRunConfig(Config):
    """How this run streams; unset: ``dagster.stream.mode`` of the binlake config."""

    continuous: bool | None = None


@op(pool="binlake_stream", description="Streams the binlog into Delta, recording each table's offsets as "
                                        "materializations (bounded: up to the binlog end as of now; continuous: "
                                        "until terminated)")
def stream_binlog(context: OpExecutionContext, config: StreamRunConfig, binlake: BinlakeResource) -> None:
    continuous = config.continuous
    if continuous is None:
        continuous = binlake.load().dagster.stream.mode == "continuous"
    binlake.stream(context, continuous=continuous)


@job(name=STREAM_JOB, executor_def=in_process_executor,
     description="The single binlog stream of the pipeline (launched by stream_handoff_sensor; one at a time)")
def stream_job():
    stream_binlog()


def active_stream_run(instance):
    """A stream run that is queued, starting, running or being cancelled, or None."""
    runs = instance.get_runs(RunsFilter(job_name=STREAM_JOB, statuses=ACTIVE), limit=1)
    return runs[0] if runs else None


def snapshot_progress(binlake: BinlakeResource) -> list[str]:
    """Tables whose snapshot is not complete, each as 'db.table (done/total chunks)'."""
    from cdc_core.routes import Router
    from pipelines.lake.control_store import ControlStore
    from pipelines.lake.tables import open_table, table_uri

    cfg = binlake.load()
    store = ControlStore.of(cfg)
    plans = store.load_plans()
    router = Router(cfg.routes)
    missing = []
    for name in binlake.tables(cfg):
        plan = plans.get(name)
        if plan is None:
            missing.append(f"{name} (not planned)")
            continue
        dt = open_table(table_uri(cfg.sink.path, router.sink(name)), cfg.sink.storage_options)
        done = store.completed_chunks(name, dt)
        if len(done) < len(plan):
            missing.append(f"{name} ({len(done)}/{len(plan)} chunks)")
    return missing


@sensor(job=stream_job, minimum_interval_seconds=10, default_status=DefaultSensorStatus.RUNNING,
        description="Hands off to the binlog stream once every table's snapshot is complete; never two streams")
def stream_handoff_sensor(context: SensorEvaluationContext, binlake: BinlakeResource):
    active = active_stream_run(context.instance)
    if active is not None:
        return SkipReason(f"stream run {active.run_id[:8]} is {active.status.value.lower()}: one stream at a time")
    last = context.instance.get_runs(RunsFilter(job_name=STREAM_JOB), limit=1)
    if last and last[0].tags.get(STOPPED_TAG) == "terminate":
        return SkipReason(f"the stream was stopped from the UI (run {last[0].run_id[:8]}): launch {STREAM_JOB} "
                          "to resume")
    if last and last[0].status == DagsterRunStatus.FAILURE:
        record = context.instance.get_run_record_by_id(last[0].run_id)
        if record.start_time is not None:
            return SkipReason(f"the last stream run {last[0].run_id[:8]} failed: fix the cause and launch "
                              f"{STREAM_JOB}")
        ended = record.end_time or record.update_timestamp.timestamp()
        if time.time() - ended < RELAUNCH_SECONDS:
            return SkipReason(f"the last stream run {last[0].run_id[:8]} could not be launched (was the code "
                              f"location unreachable?): trying again within {RELAUNCH_SECONDS:.0f} s")
    cfg = binlake.load()
    if cfg.source.startup.mode in ("initial", "snapshot"):
        if not binlake.tables(cfg):
            return SkipReason("no captured tables in the table catalog")
        waiting = snapshot_progress(binlake)
        if waiting:
            return SkipReason(f"waiting for the snapshot: {', '.join(waiting)}")
    return RunRequest(tags={STREAM_TAG: cfg.pipeline.name})
