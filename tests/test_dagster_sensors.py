"""The sensors, ticked with ``build_sensor_context`` against an instance holding real runs
and a real lake: the hand-off waits for the snapshot, fires once, never while a stream run
is queued or running, and not after a stop from the UI or a failure; after a stream run
whose launch failed (it never started) it fires again, once a while has passed; the schema sensor
fires once per pending change, and the run it requests applies the change (the held table
is released and Delta equals MySQL)."""

from __future__ import annotations

from dagster import (
    AssetKey,
    DagsterEvent,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    RunRequest,
    SkipReason,
    build_sensor_context,
)
from dagster._core.remote_origin import InProcessCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.test_utils import create_run_for_test
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from orchestration.build import build_binlake_definitions
from orchestration.schema_changes import schema_change_sensor
from orchestration.stream import STREAM_JOB, STREAM_TAG, stream_handoff_sensor
from pipelines.lake.control_store import ControlStore
from pipelines.schema.registry import pending_changes
from pipelines.source_catalog import discover
from pipelines.stream import StreamEngine
from resources.binlake import STOPPED_TAG, for_dagster
from tests.helpers import EngineThread, assert_equal, diff_tables, snapshot, wait_for, write_config_file

# Where a queued run came from (the instance requires one for queued runs).
ORIGIN = RemoteJobOrigin(RemoteRepositoryOrigin(InProcessCodeLocationOrigin(LoadableTargetOrigin(
    python_file="orchestration/definitions.py", attribute="defs")), "__repository__"), STREAM_JOB)


def _defs(cfg, tmp_path):
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    discover(cfg).write(tmp_path / "tables.json")
    return build_binlake_definitions(path, tmp_path / "tables.json")


def test_handoff_fires_once_and_never_beside_a_stream_run(db, make_config, spark, tmp_path, monkeypatch):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO a SELECT seq FROM seq_1_to_30")
    cfg = make_config(name)
    defs = _defs(cfg, tmp_path)
    instance = DagsterInstance.ephemeral()

    def tick():
        return stream_handoff_sensor(build_sensor_context(instance=instance, resources=defs.resources))

    waiting = tick()
    assert isinstance(waiting, SkipReason) and "waiting for the snapshot" in waiting.skip_message
    snapshot(cfg, spark)
    request = tick()
    assert isinstance(request, RunRequest) and request.tags == {STREAM_TAG: cfg.pipeline.name}

    for status in (DagsterRunStatus.QUEUED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED,
                   DagsterRunStatus.CANCELING):
        run = create_run_for_test(instance, job_name=STREAM_JOB, status=status, tags=request.tags,
                                  remote_job_origin=ORIGIN)
        skipped = tick()
        assert isinstance(skipped, SkipReason) and "one stream at a time" in skipped.skip_message, status
        instance.delete_run(run.run_id)

    create_run_for_test(instance, job_name=STREAM_JOB, status=DagsterRunStatus.SUCCESS, tags=request.tags)
    assert isinstance(tick(), RunRequest)  # bounded mode: the next run follows a finished one

    stopped = create_run_for_test(instance, job_name=STREAM_JOB, status=DagsterRunStatus.SUCCESS,
                                  tags={**request.tags, STOPPED_TAG: "terminate"})
    assert "stopped from the UI" in tick().skip_message
    never_started = create_run_for_test(instance, job_name=STREAM_JOB, status=DagsterRunStatus.FAILURE,
                                        tags=request.tags)  # its launch failed: it streamed nothing
    assert "could not be launched" in tick().skip_message
    monkeypatch.setattr("orchestration.stream.RELAUNCH_SECONDS", 0.0)
    assert isinstance(tick(), RunRequest)  # launched again, once RELAUNCH_SECONDS have passed
    failed = create_run_for_test(instance, job_name=STREAM_JOB, status=DagsterRunStatus.STARTED, tags=request.tags)
    instance.report_dagster_event(DagsterEvent(DagsterEventType.RUN_START.value, job_name=STREAM_JOB),
                                  run_id=failed.run_id)
    instance.report_run_failed(failed)
    assert "failed: fix the cause" in tick().skip_message
    assert len({stopped.run_id, never_started.run_id, failed.run_id}) == 3


def test_schema_sensor_fires_once_per_pending_change(db, make_config, spark, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO a SELECT seq, seq FROM seq_1_to_50")
    cfg = make_config(name, stream={"max_batch_seconds": 0.2})
    assert for_dagster(cfg).stream.schema_changes == "external"  # the default under Dagster
    cfg = for_dagster(cfg)
    snapshot(cfg, spark)
    defs = _defs(cfg, tmp_path)
    instance = DagsterInstance.ephemeral()

    def tick():
        return schema_change_sensor(build_sensor_context(instance=instance, resources=defs.resources))

    assert "no pending schema change" in tick().skip_message
    worker = EngineThread(StreamEngine(cfg))
    engine = worker.engine
    worker.start()
    try:
        worker.wait_streaming()  # its baseline is the schema before the DDL
        with conn.cursor() as cur:
            cur.execute("ALTER TABLE a ADD COLUMN note VARCHAR(20) DEFAULT 'n/a'")
            cur.execute("INSERT INTO a VALUES (100, 100, 'after')")
        store = ControlStore.of(cfg)
        wait_for(lambda: pending_changes(store), 60, "the DDL recorded as pending", interval=0.2)
        requests = tick()
        assert isinstance(requests, list) and len(requests) == 1
        (request,) = requests
        assert tick()[0].run_key == request.run_key  # the same change: the same run key, launched once
        result = defs.resolve_job_def("apply_schema_changes").execute_in_process(
            instance=instance, run_config=request.run_config)
        assert result.success
        (m,) = result.asset_materializations_for_node("apply_schema_change")
        assert m.asset_key == AssetKey([name, "a"])
        assert "ADD COLUMN note" in m.metadata["binlake/ddl"].value
        assert [c.name for c in m.metadata["binlake/source_schema_before"].value.columns] == ["id", "v"]
        assert [c.name for c in m.metadata["binlake/source_schema_after"].value.columns] == ["id", "v", "note"]
        assert "note" in [c.name for c in m.metadata["dagster/column_schema"].value.columns]
        assert m.metadata["binlake/decision"].value
        assert "no pending schema change" in tick().skip_message
        wait_for(lambda: not engine.state.holds, 60, "the engine to release the table", interval=0.2)
        # and to apply the held row
        wait_for(lambda: diff_tables(cfg, [f"{name}.a"])[0].equal, 60, "the held row in Delta", interval=0.2)
    finally:
        worker.stop(60)
    assert_equal(cfg, [f"{name}.a"])
