"""Snapshot chunks as Dagster partitions against a real MariaDB and Spark: the partitions
sensor plans chunks and adds them as dynamic partitions; one run materialises a range of
chunks (single-run backfill policy), each partition as its chunk is committed; a chunk
that failed is re-run alone; the hourly asset checks pass afterwards, and the nightly
reconciliation's checksum parity check passes chunk by chunk."""

from __future__ import annotations

import pytest
from dagster import (
    AssetCheckKey,
    AssetKey,
    DagsterInstance,
    SensorResult,
    build_sensor_context,
    materialize,
)
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from orchestration.build import build_binlake_definitions
from orchestration.checks import CHECKSUM, RECONCILE_JOB
from orchestration.snapshot import snapshot_partitions_sensor
from pipelines.snapshot.runner import GroupRunner
from pipelines.source_catalog import discover
from resources.translator import chunk_partition_key, chunk_partitions
from tests.helpers import assert_equal, write_config_file


@pytest.fixture
def dagster_setup(db, make_config, tmp_path):
    """Two tables; a config file, its table catalog and the definitions built from them."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY, s VARCHAR(20))")
        cur.execute("INSERT INTO a SELECT seq, seq FROM seq_1_to_400")
        cur.execute("INSERT INTO b SELECT seq, 'x' FROM seq_1_to_50")
    # One chunk per Spark task, one task at a time: a failing chunk stops the run after the earlier ones.
    cfg = make_config(name, parallelism=1, source={"snapshot": {"chunk_size": 100, "max_rows_per_task": 100}})
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    discover(cfg).write(tmp_path / "tables.json")
    defs = build_binlake_definitions(path, tmp_path / "tables.json")
    return name, cfg, defs


def register_partitions(instance: DagsterInstance, defs) -> None:
    result = snapshot_partitions_sensor(build_sensor_context(instance=instance, resources=defs.resources))
    assert isinstance(result, SensorResult)
    for request in result.dynamic_partitions_requests:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))


def asset_of(defs, key: AssetKey):
    return next(a for a in defs.assets if key in a.keys)


def test_chunks_are_partitions_and_a_failed_chunk_reruns_alone(dagster_setup, spark, monkeypatch):
    name, cfg, defs = dagster_setup
    key = AssetKey([name, "a"])
    instance = DagsterInstance.ephemeral()
    register_partitions(instance, defs)
    partitions = chunk_partitions(f"{name}.a")
    keys = instance.get_dynamic_partitions(partitions.name)
    assert len(keys) >= 4 and keys[0] == chunk_partition_key(0)
    # A second tick adds nothing: every chunk is a partition already.
    assert not isinstance(snapshot_partitions_sensor(build_sensor_context(instance=instance,
                                                                           resources=defs.resources)), SensorResult)

    failing = 2
    real = GroupRunner._run

    def fail_one(self, task):
        if task.chunks[0].index == failing:
            raise RuntimeError(f"chunk {failing} lost its connection")
        return real(self, task)

    monkeypatch.setattr(GroupRunner, "_run", fail_one)
    result = materialize([asset_of(defs, key)], instance=instance, resources=defs.resources, raise_on_error=False,
                         tags={ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]})
    assert not result.success
    done = instance.get_materialized_partitions(key)
    # One task slot: the chunks before the failing one finished before it started, so they are
    # committed; so may be the next one, if it finished before the failure was seen (groups that
    # finished are committed before a failure is raised). Never the failed one.
    assert {chunk_partition_key(i) for i in range(failing)} <= done
    assert chunk_partition_key(failing) not in done
    mats = result.asset_materializations_for_node("snapshot__" + name + "__a")
    assert all(m.metadata["binlake/delta_version"].value is not None for m in mats)

    monkeypatch.setattr(GroupRunner, "_run", real)
    rerun = materialize([asset_of(defs, key)], instance=instance, resources=defs.resources,
                        partition_key=chunk_partition_key(failing))
    assert rerun.success
    assert instance.get_materialized_partitions(key) == done | {chunk_partition_key(failing)}
    (m,) = rerun.asset_materializations_for_node("snapshot__" + name + "__a")
    assert m.partition == chunk_partition_key(failing) and m.metadata["dagster/row_count"].value == 100

    rest = materialize([asset_of(defs, key)], instance=instance, resources=defs.resources,
                       tags={ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]})
    assert rest.success
    assert instance.get_materialized_partitions(key) == set(keys)
    assert_equal(cfg, [f"{name}.a"])

    checks = defs.resolve_job_def("binlake_checks").execute_in_process(
        instance=instance, resources=defs.resources, asset_selection=None)
    evaluations = {(e.asset_key, e.check_name): e for e in checks.get_asset_check_evaluations()}
    assert evaluations[key, "row_count_parity"].passed
    assert evaluations[key, "schema_parity"].passed
    assert not [k for k in evaluations if k[1] == CHECKSUM]  # hourly: the costly checksum is left to the nightly job

    schedules = {s.name: s for s in defs.schedules}
    assert schedules["binlake_reconcile_schedule"].cron_schedule == cfg.dagster.reconcile_cron == "0 2 * * *"
    assert schedules["binlake_reconcile_schedule"].job_name == RECONCILE_JOB
    nightly = defs.resolve_job_def(RECONCILE_JOB).get_subset(asset_check_selection={AssetCheckKey(key, CHECKSUM)})
    (checksum,) = nightly.execute_in_process(instance=instance, resources=defs.resources).get_asset_check_evaluations()
    md = {k: v.value for k, v in checksum.metadata.items()}
    assert checksum.passed and checksum.asset_key == key
    assert (md["binlake/chunks_checked"], md["binlake/differing_chunks"]) == (len(keys), 0)
    assert md["binlake/mysql_rows"] == md["binlake/delta_rows"] == 400


def test_definitions_take_the_s3_sink_of_the_config(db, make_config, s3_sink, tmp_path):
    """The Dagster definitions read the lake's settings from the same config: with the lake on
    S3 (moto), the snapshot asset writes there and the row-count and schema parity checks
    read it back with the same storage options."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY, s VARCHAR(20))")
        cur.execute("INSERT INTO b SELECT seq, CONCAT('x', seq) FROM seq_1_to_250")
    cfg = make_config(name, parallelism=1, sink=s3_sink, source={"snapshot": {"chunk_size": 100}})
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    discover(cfg).write(tmp_path / "tables.json")
    defs = build_binlake_definitions(path, tmp_path / "tables.json")
    key = AssetKey([name, "b"])
    instance = DagsterInstance.ephemeral()
    register_partitions(instance, defs)
    keys = instance.get_dynamic_partitions(chunk_partitions(f"{name}.b").name)
    result = materialize([asset_of(defs, key)], instance=instance, resources=defs.resources,
                         tags={ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]})
    assert result.success and instance.get_materialized_partitions(key) == set(keys)
    assert cfg.sink.path.startswith("s3://")
    assert_equal(cfg, [f"{name}.b"])
    checks = defs.resolve_job_def("binlake_checks").execute_in_process(
        instance=instance, resources=defs.resources, asset_selection=None)
    evaluations = {(e.asset_key, e.check_name): e for e in checks.get_asset_check_evaluations()}
    assert evaluations[key, "row_count_parity"].passed and evaluations[key, "schema_parity"].passed
