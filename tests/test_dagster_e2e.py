"""End to end through Dagster itself: ``dagster dev`` (webserver and daemon, the shipped
dagster.yaml) on a free port, driven through its GraphQL API against a real MariaDB. The
snapshot is launched as a backfill of every chunk partition; the hand-off sensor starts the
continuous stream; rows and a DDL written in MariaDB come through (the schema sensor's run
succeeds, the column is in Delta and on the asset's column schema, the offset metadata
advances); Terminate stops the run cleanly; Delta equals MySQL."""

from __future__ import annotations

import time

import pytest
from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.scheduler.instigation import InstigatorType, TickStatus
from deltalake import DeltaTable

from devtools.local_mariadb import _free_port
from devtools.ui import (
    component_state_path,
    dagster_home,
    launch_snapshot,
    start_dagster_dev,
    stop_dagster,
    terminate_run,
    wait_for_webserver,
)
from orchestration.stream import STREAM_JOB
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import table_uri
from pipelines.source_catalog import discover
from resources.binlake import STOPPED_TAG
from tests.helpers import assert_equal, write_config_file


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(1)


def runs(instance, job: str, statuses=None):
    return instance.get_runs(RunsFilter(job_name=job, statuses=statuses or []))


def sensor_ticks_after(instance, sensor: str, after: float) -> list:
    """The ticks of ``sensor`` that started after ``after`` (a time.time()) and have ended."""
    (state,) = [s for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
                if s.instigator_name == sensor]
    return [t for t in instance.get_ticks(state.instigator_origin_id, state.selector_id, after=after)
            if t.status != TickStatus.STARTED]


def latest_stream_offset(instance, key: AssetKey) -> int | None:
    for r in instance.fetch_materializations(key, limit=20).records:
        md = r.asset_materialization.metadata
        if "binlake/cdc_seq" in md:
            return md["binlake/cdc_seq"].value
    return None


@pytest.mark.slow
def test_dagster_dev_end_to_end(db, make_config, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY, s VARCHAR(20))")
        cur.execute("INSERT INTO a SELECT seq, seq FROM seq_1_to_300")
        cur.execute("INSERT INTO b SELECT seq, 'x' FROM seq_1_to_30")
    cfg = make_config(name, stream={"max_batch_seconds": 0.5, "heartbeat_seconds": 2, "schema_changes": "external"},
                      dagster={"stream": {"mode": "continuous"}, "idle_offset_seconds": 5})
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    state = component_state_path(cfg.pipeline.name)
    discover(cfg).write(state)
    home = dagster_home(tmp_path / "home")
    port = _free_port()
    proc = start_dagster_dev(config, home, port, tmp_path / "dagster.log")
    tables = [f"{name}.a", f"{name}.b"]
    try:
        wait_for_webserver(port, proc)
        instance = DagsterInstance.from_config(str(home))
        # The partitions sensor plans the chunks and adds them as partitions.
        wait(lambda: instance.get_dynamic_partitions(f"binlake_chunks__{name}__a"), 300, "chunk partitions")
        launch_snapshot(port, tables)
        stream = wait(lambda: runs(instance, STREAM_JOB, [DagsterRunStatus.STARTED]), 600,
                      "the hand-off sensor to start the stream")[0]
        assert stream.tags["dagster/sensor_name"] == "stream_handoff_sensor"
        key = AssetKey([name, "a"])
        assert instance.get_materialized_partitions(key) == set(
            instance.get_dynamic_partitions(f"binlake_chunks__{name}__a"))
        first = wait(lambda: latest_stream_offset(instance, key), 300, "the stream's first offset on the asset")

        with conn.cursor() as cur:
            cur.execute("INSERT INTO a SELECT seq, seq FROM seq_1001_to_1100")
            cur.execute("UPDATE b SET s = 'y' WHERE id <= 10")
            cur.execute("ALTER TABLE a ADD COLUMN note VARCHAR(20)")
            cur.execute("INSERT INTO a VALUES (2000, 1, 'after the DDL')")
        wait(lambda: runs(instance, "apply_schema_changes", [DagsterRunStatus.SUCCESS]), 300,
             "the schema-change run to succeed")
        uri = table_uri(cfg.sink.path, f"{name}.a")
        wait(lambda: "note" in DeltaTable(uri).schema().to_arrow().names, 300, "the new column in Delta")

        def column_on_asset() -> bool:
            for r in instance.fetch_materializations(key, limit=5).records:
                schema = r.asset_materialization.metadata.get("dagster/column_schema")
                if schema is not None:
                    return "note" in [c.name for c in schema.value.columns]
            return False

        wait(column_on_asset, 300, "the column on the asset's column schema")
        wait(lambda: DeltaTable(uri).to_pyarrow_dataset().count_rows() == 401, 300, "the rows after the DDL")
        assert latest_stream_offset(instance, key) > first

        terminate_run(port, stream.run_id)
        ended = wait(lambda: [r for r in [instance.get_run_by_id(stream.run_id)] if r.is_finished], 300,
                     "the stream run to stop")[0]
        assert ended.status in (DagsterRunStatus.SUCCESS, DagsterRunStatus.CANCELED)
        assert ended.tags.get(STOPPED_TAG) == "terminate"
        failures = instance.get_records_for_run(stream.run_id, of_type=DagsterEventType.STEP_FAILURE).records
        assert not failures  # a clean stop is no failure
        assert ControlStore.of(cfg).checkpoint().state == "stopped"
        stopped = time.time()
        # A hand-off tick after the stop has decided: a stream stopped from the UI is not relaunched.
        wait(lambda: sensor_ticks_after(instance, "stream_handoff_sensor", stopped), 120,
             "a hand-off sensor tick after the stop")
        assert not runs(instance, STREAM_JOB, [DagsterRunStatus.QUEUED, DagsterRunStatus.STARTED])
        assert_equal(cfg, tables)
    except BaseException:
        print((tmp_path / "dagster.log").read_text()[-30000:])  # what Dagster did, shown with the failure
        raise
    finally:
        stop_dagster(proc)
        state.unlink(missing_ok=True)
