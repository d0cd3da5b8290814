"""A bounded run of the stream job against a real MariaDB: every committed micro-batch is
a materialization of each touched table's asset whose offset metadata equals that
table's Delta commit (position, ``_cdc_seq`` = transaction version, Delta version, rows by
op); an untouched table gets one heartbeat; Delta equals MySQL afterwards. The backfill and
repair jobs request their backfills and wait while a bounded stream run does them; one
backfill launch of several tables (a key range on one) is done by the running stream under
writes; a launch naming a table that is not captured requests nothing."""

from __future__ import annotations

from dagster import AssetKey, DagsterInstance
from deltalake import DeltaTable

from cdc_core.offset.stream_offset import OFFSET_KEY, StreamOffset, app_id
from orchestration.build import build_binlake_definitions
from pipelines.lake.tables import table_uri
from pipelines.lake.writer_lock import writer_lock
from pipelines.source_catalog import discover
from tests.helpers import assert_equal, snapshot, write_config_file


def stream_commits(cfg, table: str) -> list[tuple[int, StreamOffset, dict]]:
    """(Delta version, offset, operation metrics) of each stream commit of ``table``, oldest first."""
    history = DeltaTable(table_uri(cfg.sink.path, table)).history()
    return [(c["version"], StreamOffset.from_json(c[OFFSET_KEY]), c.get("operationMetrics", {}))
            for c in reversed(history) if OFFSET_KEY in c]


def test_bounded_run_records_offsets_per_batch(db, make_config, spark, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY, s VARCHAR(20))")
        cur.execute("INSERT INTO a SELECT seq, seq FROM seq_1_to_300")
        cur.execute("INSERT INTO b SELECT seq, 'x' FROM seq_1_to_20")
    cfg = make_config(name, stream={"max_batch_rows": 50})
    snapshot(cfg, spark)
    inserted, updated, deleted = 120, 40, 15
    with conn.cursor() as cur:
        for i in range(inserted):  # one transaction each: batches are cut at max_batch_rows
            cur.execute("INSERT INTO a VALUES (%s, 0)", (1000 + i,))
        for i in range(updated):
            cur.execute("UPDATE a SET v = v + 1 WHERE id = %s", (i + 1,))
        cur.execute("DELETE FROM a WHERE id BETWEEN 101 AND %s", (100 + deleted,))
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    discover(cfg).write(tmp_path / "tables.json")
    defs = build_binlake_definitions(path, tmp_path / "tables.json")
    instance = DagsterInstance.ephemeral()
    result = defs.resolve_job_def("binlake_stream").execute_in_process(
        instance=instance, run_config={"ops": {"stream_binlog": {"config": {"continuous": False}}}})
    assert result.success
    mats = result.asset_materializations_for_node("stream_binlog")

    a = [m for m in mats if m.asset_key == AssetKey([name, "a"]) and m.description == "stream batch committed"]
    commits = stream_commits(cfg, f"{name}.a")
    assert len(a) == len(commits) >= 3  # one materialization per committed batch
    for m, (version, offset, _) in zip(a, commits):
        md = {k: v.value for k, v in m.metadata.items()}
        assert (md["binlake/binlog_file"], md["binlake/binlog_pos"]) == (offset.applied.file, offset.applied.pos)
        assert md["binlake/delta_version"] == version
        assert md["binlake/cdc_seq"] == offset.applied.seq()
    dt = DeltaTable(table_uri(cfg.sink.path, f"{name}.a"))
    assert a[-1].metadata["binlake/cdc_seq"].value == dt.transaction_version(app_id(cfg.pipeline.name))
    assert sum(m.metadata["binlake/rows_inserted"].value for m in a) == inserted
    assert sum(m.metadata["binlake/rows_updated"].value for m in a) == updated
    assert sum(m.metadata["binlake/rows_deleted"].value for m in a) == deleted
    assert a[-1].metadata["dagster/row_count"].value == 300 + inserted - deleted
    assert a[-1].metadata["binlake/lag_bytes"].value == 0  # bounded: drained up to the binlog end
    assert [c.name for c in a[-1].metadata["dagster/column_schema"].value.columns] == ["id", "v", "_cdc_op",
                                                                                      "_cdc_seq"]

    b = [m for m in mats if m.asset_key == AssetKey([name, "b"])]
    assert [m.description for m in b] == ["idle: stream checkpoint heartbeat"]  # bounded rate: once per run here
    assert_equal(cfg, [f"{name}.a", f"{name}.b"])


def test_backfill_and_repair_jobs_wait_for_the_stream_job_to_do_them(db, make_config, spark, tmp_path):
    """Delta damaged by hand in two tables. The checksum parity check of ``b`` fails, listing
    its differing chunks; ``binlake_repair`` of ``b`` and ``binlake_backfill`` of ``a`` each
    request backfills and wait; one bounded stream run does them; the repair records ``b``'s
    check again, passing; Delta equals MySQL."""
    import threading

    from dagster import AssetCheckKey
    from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
    from deltalake import write_deltalake

    from orchestration.checks import CHECKSUM, RECONCILE_JOB
    from pipelines.lake.control_store import ControlStore

    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO a SELECT seq, seq FROM seq_1_to_500")
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO b SELECT seq, seq FROM seq_1_to_300")
    cfg = make_config(name, chunk_size=120)
    snapshot(cfg, spark)
    dt = DeltaTable(table_uri(cfg.sink.path, f"{name}.a"))
    dt.delete("id % 3 = 0")
    write_deltalake(dt, dt.to_pyarrow_table().slice(0, 1), mode="append")  # a key twice
    b = DeltaTable(table_uri(cfg.sink.path, f"{name}.b"))
    b.delete("id >= 10 AND id < 20")  # chunk 0 loses rows
    b.update(predicate="id = 250", updates={"v": "-1"})  # chunk 2 has a changed row
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    discover(cfg).write(tmp_path / "tables.json")
    defs = build_binlake_definitions(path, tmp_path / "tables.json")
    instance = DagsterInstance.ephemeral()
    no_rechecks = {"rechecks": 0}  # nothing changes the tables here: a difference is reported at once
    check_b = AssetCheckKey(AssetKey([name, "b"]), CHECKSUM)
    nightly = defs.resolve_job_def(RECONCILE_JOB).get_subset(asset_check_selection={check_b}).execute_in_process(
        instance=instance, run_config={"ops": {"binlake_checksum_checks": {"config": no_rechecks}}})
    (failed,) = nightly.get_asset_check_evaluations()
    assert not failed.passed and "binlake_repair" in failed.description
    assert failed.metadata["binlake/differing_chunks"].value == 2
    assert (failed.metadata["binlake/mysql_rows"].value, failed.metadata["binlake/delta_rows"].value) == (300, 290)
    differing = failed.metadata["binlake/differing"].value.records
    # The chunks holding ids 10-19 and 250; their bounds follow InnoDB's estimate of the row count
    # (cdc_core/chunks/planning.py: the arithmetic split), so each is checked against its own range.
    assert [r.data["chunk"] for r in differing] == [0, 2]
    for r in differing:
        lo = 1 if r.data["from"] == "-" else int(r.data["from"])
        hi = 301 if r.data["to"] == "-" else int(r.data["to"])
        ids = range(max(lo, 1), min(hi, 301))  # b holds ids 1..300 in MySQL
        assert (r.data["mysql_rows"], r.data["delta_rows"]) == (len(ids), sum(1 for i in ids if not 10 <= i < 20))

    results, instances = {}, {}

    def launch(job: str, op: str, config: dict) -> threading.Thread:
        # Each run in its own thread has its own instance: one in-memory SQLite written from three
        # threads at once can fail with "database table is locked".
        instances[job] = DagsterInstance.ephemeral()
        t = threading.Thread(target=lambda: results.__setitem__(job, defs.resolve_job_def(job).execute_in_process(
            instance=instances[job], run_config={"ops": {op: {"config": config}}})))
        t.start()
        return t

    waiters = [launch("binlake_backfill", "backfill_table", {"table": f"{name}.a"}),
               launch("binlake_repair", "repair_chunks", {"tables": [f"{name}.b"], **no_rechecks})]
    store = ControlStore.of(cfg)
    for _ in range(600):
        if {r.table for r in store.backfills()} == {f"{name}.a", f"{name}.b"}:
            break
        waiters[1].join(0.1)
    requested = store.backfills()
    assert {r.table for r in requested} == {f"{name}.a", f"{name}.b"}, "the jobs did not request their backfills"
    repairs = sorted((r for r in requested if r.table == f"{name}.b"), key=lambda r: r.lo or 0)
    assert [(r.lo, r.hi) for r in repairs] == [(None, 121), (241, None)]  # exactly the two differing chunks
    stream = defs.resolve_job_def("binlake_stream").execute_in_process(
        instance=instance, run_config={"ops": {"stream_binlog": {"config": {"continuous": False}}}})
    assert stream.success
    for w in waiters:
        w.join(120)
    assert results["binlake_backfill"].success and results["binlake_repair"].success
    output = next(e for e in results["binlake_backfill"].all_node_events if e.event_type_value == "STEP_OUTPUT")
    md = output.event_specific_data.metadata
    assert md["binlake/chunks"].value >= 4 and md["binlake/tables"].value == f"{name}.a"
    output = next(e for e in results["binlake_repair"].all_node_events if e.event_type_value == "STEP_OUTPUT")
    assert output.event_specific_data.metadata["binlake/differing_chunks"].value == 2
    (recorded,) = results["binlake_repair"].get_asset_check_evaluations()
    assert recorded.asset_check_key == check_b and recorded.passed
    latest = instances["binlake_repair"].event_log_storage.get_asset_check_execution_history(check_b, limit=1)[0]
    assert latest.status == AssetCheckExecutionRecordStatus.SUCCEEDED  # what the asset page shows now
    assert_equal(cfg, [f"{name}.a", f"{name}.b"])


def _backfill_defs(cfg, tmp_path):
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    discover(cfg).write(tmp_path / "tables.json")
    return build_binlake_definitions(path, tmp_path / "tables.json")


def test_backfill_of_several_tables_in_one_launch_while_the_stream_runs_under_writes(db, make_config, spark,
                                                                                      tmp_path):
    """Delta of ``a`` damaged everywhere, of ``b`` only in ``[400, 900)``. One ``binlake_backfill``
    launch of ``a`` (whole) and ``b`` (keys ``[400, 900)``) while the stream runs and writers
    change rows of both tables, in and out of the range: one request per table, each done by
    the stream; the run records an observation per table (request id, range, chunks, rows,
    duration) and a summary; Delta equals MySQL for both."""
    from cdc_core.chunks.incremental import BackfillRequest, BackfillState
    from cdc_core.source.connection import connection_settings
    from pipelines.lake.control_store import ControlStore
    from pipelines.stream import StreamEngine
    from tests.helpers import EngineThread, diff_tables
    from tests.test_backfill import _damage, _merges, _table, _writers
    from tests.test_stream_crash import wait_for

    name, conn = db
    with conn.cursor() as cur:
        _table(cur, "a", 3000)
        _table(cur, "b", 1500)
    cfg = make_config(name, chunk_size=400, stream={"max_batch_rows": 200, "max_batch_seconds": 0.3})
    snapshot(cfg, spark)
    a, b = f"{name}.a", f"{name}.b"
    _damage(cfg, a, range(1, 3000))
    damaged = DeltaTable(table_uri(cfg.sink.path, b))  # only in the range (_damage also adds keys outside it)
    damaged.delete("id % 7 = 0 AND id >= 400 AND id < 900")
    damaged.update(updates={"v": "-1"}, predicate="id % 5 = 0 AND id >= 400 AND id < 900")
    assert not any(d.equal for d in diff_tables(cfg, [a, b]))
    defs = _backfill_defs(cfg, tmp_path)
    instance = DagsterInstance.ephemeral()
    stream = EngineThread(StreamEngine(cfg))
    stream.start()
    try:
        stream.wait_streaming()
        # b's writer keeps below 650: the stream repairs every damaged key it touches, and on a slow
        # machine it touches them all before the merge; [650, 900) is left for the merge.
        with _writers(connection_settings(cfg), name, a=(3000, 11), b=(650, 12)) as touched:
            result = defs.resolve_job_def("binlake_backfill").execute_in_process(
                instance=instance, run_config={"ops": {"backfill_table": {"config": {"tables": [
                    {"table": a}, {"table": b, "from_key": "400", "to_key": "900"}]}}}})
        assert len(touched["a"]) > 50 and any(400 <= k < 900 for k in touched["b"])
        wait_for(lambda: all(d.equal for d in diff_tables(cfg, [a, b])), 180, "Delta to catch up with MySQL",
                 interval=0.5)
    finally:
        stream.stop()
    assert result.success
    requests = ControlStore.of(cfg).backfills()
    assert [(r.table, r.lo, r.hi, r.state) for r in requests] == [(a, None, None, BackfillState.DONE),
                                                                  (b, 400, 900, BackfillState.DONE)]
    observed = {e.asset_observation_data.asset_observation.asset_key: e.asset_observation_data.asset_observation
                for e in result.all_node_events if e.event_type_value == "ASSET_OBSERVATION"}
    assert set(observed) == {AssetKey([name, "a"]), AssetKey([name, "b"])}
    states = [BackfillRequest.from_row(r) for r in ControlStore.of(cfg)._read("backfill_requests")]
    for req in requests:
        md = {k: v.value for k, v in observed[AssetKey(req.table.split("."))].metadata.items()}
        assert (md["binlake/backfill_id"], md["binlake/table"], md["binlake/range"]) == (
            req.id, req.table, req.describe_range())
        assert (md["binlake/chunks"], md["binlake/rows"]) == (len(req.chunks), req.rows)
        # from the request's first stored state to its last (done), as the control table has them
        first = min((s for s in states if s.id == req.id), key=lambda s: s.seq)
        assert md["binlake/duration_seconds"] == round((req.updated_at - first.updated_at).total_seconds(), 1)
        assert md["binlake/duration_seconds"] > 0
    assert len(requests[0].chunks) >= 8 and all(400 <= c.lo and c.hi <= 900 for c in requests[1].chunks)
    output = next(e for e in result.all_node_events if e.event_type_value == "STEP_OUTPUT")
    summary = output.event_specific_data.metadata
    assert [(r.data["table"], r.data["backfill_id"]) for r in summary["binlake/backfills"].value.records] == [
        (r.table, r.id) for r in requests]
    assert summary["binlake/rows"].value == sum(r.rows for r in requests)
    logged = [e.user_message for e in instance.all_logs(result.run_id)]
    for r in requests:  # each table's progress, up to done
        assert any(m.startswith(f"backfill {r.id} of {r.table} ({r.describe_range()}): done ") for m in logged)
    merged = _merges(cfg, b)
    assert {m["id"] for m in merged} == {requests[1].id}  # b: merges of its range only
    assert sum(m["appended"] + m["upserted"] for m in merged) > 0  # [650, 900): repaired by the merge
    assert_equal(cfg, [a, b])


def test_backfill_naming_a_table_not_captured_requests_nothing(db, make_config, tmp_path):
    """A launch naming a captured table, a table of another database, a captured name that
    does not exist and a bound that is not a value of the key fails before anything is
    requested, naming each refused entry."""
    from pipelines.lake.control_store import ControlStore

    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
    cfg = make_config(name)
    defs = _backfill_defs(cfg, tmp_path)
    result = defs.resolve_job_def("binlake_backfill").execute_in_process(
        instance=DagsterInstance.ephemeral(), raise_on_error=False, run_config={"ops": {"backfill_table": {
            "config": {"tables": [{"table": f"{name}.a"}, {"table": "mysql.user"}, {"table": f"{name}.nope"},
                                  {"table": f"{name}.a", "from_key": "ten"}]}}}})
    assert not result.success
    (failure,) = [e for e in result.all_node_events if e.event_type_value == "STEP_FAILURE"]
    message = failure.event_specific_data.error.message
    assert "nothing requested" in message
    assert "mysql.user is not captured by this pipeline" in message
    assert f"{name}.nope does not exist on the source" in message
    assert f"{name}.a: 'ten' is not a value of the chunk key column id" in message
    assert ControlStore.of(cfg).backfills() == []


def test_backfill_config_selection_keeps_the_one_table_shorthand():
    """``table``/``from_key``/``to_key`` (the one-table launch) is one more entry of ``tables``;
    a range without a table, or no table at all, is refused."""
    import pytest
    from dagster import Failure

    from orchestration.backfill import BackfillRunConfig

    both = BackfillRunConfig(tables=[{"table": "d.a"}], table="d.b", from_key="5").selection()
    assert [(t.table, t.from_key, t.to_key) for t in both] == [("d.a", None, None), ("d.b", "5", None)]
    with pytest.raises(Failure, match="from_key/to_key without table"):
        BackfillRunConfig(tables=[{"table": "d.a"}], to_key="9").selection()
    with pytest.raises(Failure, match="nothing to backfill"):
        BackfillRunConfig().selection()


def test_stream_run_refuses_while_another_process_writes_the_pipeline(db, make_config, spark, tmp_path):
    """The stream job takes the pipeline's writer lock as the CLI's writers do: with a
    ``binlake stream`` holding it, the run fails at once naming the holder and writes nothing;
    once it is free the run streams, and lets the lock go when it ends."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO a SELECT seq, seq FROM seq_1_to_50")
    cfg = make_config(name)
    snapshot(cfg, spark)
    with conn.cursor() as cur:
        cur.execute("UPDATE a SET v = -v WHERE id <= 10")
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    discover(cfg).write(tmp_path / "tables.json")
    job = build_binlake_definitions(path, tmp_path / "tables.json").resolve_job_def("binlake_stream")
    run_config = {"ops": {"stream_binlog": {"config": {"continuous": False}}}}
    lock = writer_lock(cfg.sink.path, cfg.pipeline.name, "binlake stream -c elsewhere.yaml")
    versions = DeltaTable(table_uri(cfg.sink.path, f"{name}.a")).version()
    with lock:
        refused = job.execute_in_process(instance=DagsterInstance.ephemeral(), run_config=run_config,
                                         raise_on_error=False)
    assert not refused.success
    failure = next(e for e in refused.all_events if e.is_step_failure).step_failure_data.error.message
    assert "already being written" in failure and "binlake stream -c elsewhere.yaml" in failure, failure
    assert DeltaTable(table_uri(cfg.sink.path, f"{name}.a")).version() == versions  # nothing written
    result = job.execute_in_process(instance=DagsterInstance.ephemeral(), run_config=run_config)
    assert result.success
    assert writer_lock(cfg.sink.path, cfg.pipeline.name, "binlake status").holder() is None  # released
    assert_equal(cfg, [f"{name}.a"])


def test_maintenance_job_small_files_check_and_upkeep_metadata(db, make_config, spark, tmp_path):
    """With the stream's own maintenance off, small files pile up: the check ``small_files_under_bound``
    fails, naming the count; the job ``binlake_maintenance`` (no stream running: under the writer
    lock in the run) compacts and vacuums, recording each table's upkeep on its asset; the check
    then passes with the last compaction and vacuum as metadata. The schedule is there, stopped."""
    from dagster import DefaultScheduleStatus

    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO a SELECT seq, seq FROM seq_1_to_300")
    cfg = make_config(name, stream={"max_batch_rows": 5},
                      sink={"maintenance": {"auto": False, "max_small_files": 3, "retention_hours": 0}},
                      dagster={"maintenance_cron": "15 4 * * *"})
    snapshot(cfg, spark)
    with conn.cursor() as cur:
        for i in range(60):
            cur.execute("INSERT INTO a VALUES (%s, 0)", (1000 + i,))
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    discover(cfg).write(tmp_path / "tables.json")
    defs = build_binlake_definitions(path, tmp_path / "tables.json")
    schedule = defs.resolve_schedule_def("binlake_maintenance_schedule")
    assert schedule.cron_schedule == "15 4 * * *" and schedule.default_status == DefaultScheduleStatus.STOPPED
    instance = DagsterInstance.ephemeral()
    streamed = defs.resolve_job_def("binlake_stream").execute_in_process(
        instance=instance, run_config={"ops": {"stream_binlog": {"config": {"continuous": False}}}})
    assert streamed.success
    last = [m for m in streamed.asset_materializations_for_node("stream_binlog")
            if m.description == "stream batch committed"][-1]
    files = len(DeltaTable(table_uri(cfg.sink.path, f"{name}.a")).file_uris())
    assert last.metadata["binlake/live_files"].value == files > 10

    def small_files_check():
        checks = defs.resolve_job_def("binlake_checks").execute_in_process(instance=instance)
        (e,) = [e for e in checks.get_asset_check_evaluations() if e.check_name == "small_files_under_bound"]
        return e

    before = small_files_check()
    assert not before.passed and before.metadata["binlake/small_files"].value > 3
    assert "binlake/last_compaction" not in before.metadata

    maintained = defs.resolve_job_def("binlake_maintenance").execute_in_process(instance=instance)
    assert maintained.success
    (obs,) = [e.event_specific_data.asset_observation for e in maintained.all_events
              if e.event_type_value == "ASSET_OBSERVATION"]
    md = {k: v.value for k, v in obs.metadata.items()}
    assert obs.asset_key == AssetKey([name, "a"]) and md["binlake/files_before"] == files > md["binlake/files_after"]
    assert md["binlake/live_files"] == md["binlake/files_after"] and md["binlake/bytes_awaiting_vacuum"] == 0
    assert md["binlake/bytes_deleted"] > 0 and "live files" in md["binlake/last_compaction"]

    after = small_files_check()
    assert after.passed and "binlake/last_vacuum" in after.metadata
    assert_equal(cfg, [f"{name}.a"])
