"""Scheduled backfills (``dagster.backfills``, orchestration/scheduled_backfills.py) as the real
Dagster daemon ticks them: ``dagster-daemon run`` on the shipped dagster.yaml, against a real
MariaDB, with the continuous stream run the hand-off sensor launched going meanwhile and
writers changing rows. A schedule backfilling a key range of a damaged table and a
``repair_only`` schedule of another each launch their job, whose backfills the running stream
does: Delta equals MySQL row by row afterwards, and the stream run is the same one, never
stopped or doubled. A schedule whose regexes select nothing (a dropped table, a name that never
matched) fails its tick naming them and launches nothing; a schedule not marked ``running``
never ticks. The configuration refuses a bad cron, a duplicate name, an unknown key, naming
the key; every cron it accepts, Dagster accepts."""

from __future__ import annotations

import threading
import time

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.scheduler.instigation import InstigatorType, TickStatus
from dagster._utils.schedules import is_valid_cron_string
from deltalake import DeltaTable

from cdc_core.chunks.incremental import BackfillState
from cdc_core.config import ConfigError, parse_config
from cdc_core.cron import cron_problem
from cdc_core.source.connection import connection_settings
from devtools.ui import component_state_path, dagster_home, start_dagster, stop_dagster
from orchestration.scheduled_backfills import SCHEDULE_PREFIX, SCHEDULED_TAG
from orchestration.stream import STREAM_JOB
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import table_uri
from pipelines.snapshot.driver import SnapshotJob
from pipelines.source_catalog import discover
from tests.helpers import assert_equal, diff_tables, write_config_file
from tests.test_backfill import _damage, _merges, _table, _writer

CRONS = ["* * * * *", "0 3 * * 0", "*/5 * * * *", "0 0 1 1 *", "0 0 * * mon-fri", "0 0 * JAN,jul *",
         "5/10 * * * *", "1-10/2 * * * *", "@daily", "@hourly", "@weekly", "@monthly", "@yearly", "@annually",
         "@midnight", "0 0 29 2 *", "* * * * 7", "1,2,3 * * * *", "*/15 0-6 * * sun", "0 0 * * sat-sun",
         "5-1 * * * *", "0 0 * dec-jan *", "00 01 * * *", "0 0 1-31/7 * *", "*/2,5 * * * *",
         # refused by both
         "@reboot", "0 0 30 2 *", "0 0 31 2 *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *",
         "* * * 13 *", "* * * 0 *", "* * * * 8", "*/0 * * * *", "* * * *", "* * * * * *", "0 0 * * 5L",
         "0 0 15W * *", "a * * * *", "1- * * * *", "",
         # refused here only (named in cdc_core/cron.py)
         "0 0 L * *", "0 0 * * mon#2", "0 0 ? * *", "0 0 30,31 2 *"]


def test_every_cron_accepted_is_one_dagster_accepts():
    accepted = [c for c in CRONS if cron_problem(c) is None]
    assert accepted and all(is_valid_cron_string(c) for c in accepted), [
        c for c in accepted if not is_valid_cron_string(c)]
    refused_here_only = {c for c in CRONS if cron_problem(c) is not None and is_valid_cron_string(c)}
    assert refused_here_only == {"0 0 L * *", "0 0 * * mon#2", "0 0 ? * *", "0 0 30,31 2 *"}


BASE = {"pipeline": {"name": "p"}, "source": {"user": "u", "tables": [r"shop\..*"]}}


@pytest.mark.parametrize("backfills, message", [
    ([{"name": "a", "cron": "61 * * * *", "tables": ["x"]}], "dagster.backfills.0.cron: Value error, not a cron "
                                                           "expression: minute field: '61' is not 0-59"),
    ([{"name": "a", "cron": "@daily", "tables": ["x"]}, {"name": "a", "cron": "@daily", "tables": ["y"]}],
     "dagster.backfills: Value error, [1].name: 'a' is the name of [0] too"),
    ([{"name": "a", "cron": "@daily", "tables": ["x"], "table": "x"}], "dagster.backfills.0.table: unknown key"),
    ([{"name": "a b", "cron": "@daily", "tables": ["x"]}], "dagster.backfills.0.name: String should match"),
    ([{"name": "a", "cron": "@daily", "tables": []}], "dagster.backfills.0.tables: List should have at least 1"),
    ([{"name": "a", "cron": "@daily", "tables": ["x("]}], "dagster.backfills.0.tables: Value error, invalid regex"),
    ([{"name": "a", "cron": "@daily", "tables": ["x"], "timezone": "Mars/Base"}],
     "dagster.backfills.0.timezone: Value error, unknown time zone 'Mars/Base'"),
    ([{"name": "a", "cron": "@daily", "tables": ["x"], "repair_only": True, "from_key": 5}],
     "dagster.backfills.0: Value error, from_key/to_key are not for repair_only"),
    ([{"cron": "@daily", "tables": ["x"]}], "dagster.backfills.0.name: required key missing"),
])
def test_backfill_config_errors_name_the_key(backfills, message):
    with pytest.raises(ConfigError) as e:
        parse_config({**BASE, "dagster": {"backfills": backfills}})
    assert message in str(e.value)


def test_backfill_config_defaults_and_bounds_as_text():
    (b,) = parse_config({**BASE, "dagster": {"backfills": [
        {"name": "w", "cron": "0 3 * * sun", "tables": [r"shop\.orders"], "from_key": 1000}]}}).dagster.backfills
    assert (b.from_key, b.to_key, b.repair_only, b.running, b.timezone) == ("1000", None, False, False, None)


def wait(predicate, timeout: float, what: str, proc=None):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the daemon exited (code {proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(1)
    return value


def scheduled_runs(instance, schedule: str):
    return instance.get_runs(RunsFilter(tags={"dagster/schedule_name": SCHEDULE_PREFIX + schedule}))


def ticks(instance, schedule: str, status=None):
    for state in instance.all_instigator_state(instigator_type=InstigatorType.SCHEDULE):
        if state.instigator_name == SCHEDULE_PREFIX + schedule:
            return instance.get_ticks(state.instigator_origin_id, state.selector_id,
                                      statuses=[status] if status else None)
    return []


@pytest.mark.slow
def test_scheduled_backfills_ticked_by_the_daemon_while_the_stream_runs(db, make_config, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        _table(cur, "a", 600)
        _table(cur, "b", 400)
        _table(cur, "gone", 10)
    a, b = f"{name}.a", f"{name}.b"
    cfg = make_config(name, chunk_size=100, stream={"max_batch_seconds": 0.3, "heartbeat_seconds": 2,
                                                    "schema_changes": "inline"},
                      dagster={"stream": {"mode": "continuous"}, "idle_offset_seconds": 5, "backfills": [
                          {"name": "a_below_300", "cron": "* * * * *", "tables": [rf"{name}\.a"], "to_key": 300,
                           "running": True},
                          {"name": "b_repair", "cron": "* * * * *", "tables": [rf"{name}\.b"], "repair_only": True,
                           "running": True},
                          {"name": "vanished", "cron": "* * * * *", "tables": [rf"{name}\.gone", rf"{name}\.never_.*"],
                           "running": True},
                          {"name": "stopped", "cron": "* * * * *", "tables": [rf"{name}\.a"]}]})
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    state = component_state_path(cfg.pipeline.name)
    discover(cfg).write(state)  # the catalog lists `gone`, dropped below
    SnapshotJob(cfg).run()
    with conn.cursor() as cur:
        cur.execute("DROP TABLE gone")  # the stream applies it when it reads it
    # The writers change other rows than the damaged ones: only the backfills can make these right.
    _damage(cfg, a, range(1, 300))  # below 300, and 3 rows with negative keys (within `to_key: 300`)
    damaged = DeltaTable(table_uri(cfg.sink.path, b))  # b: rows of one chunk
    damaged.delete("id >= 150 AND id < 170")
    damaged.update(updates={"v": "-1"}, predicate="id >= 170 AND id < 180")
    assert not any(d.equal for d in diff_tables(cfg, [a, b]))
    home = dagster_home(tmp_path / "home")
    instance = DagsterInstance.from_config(str(home))  # its storage created before the daemon opens it
    daemon = start_dagster(["dagster-daemon", "run", "-w", "workspace.yaml"], config, home, tmp_path / "daemon.log")
    stop_writes = threading.Event()
    # About 20 changes a second to each table, to rows above the damaged ones.
    writers = [threading.Thread(target=_writer, daemon=True, kwargs={"lo": lo, "pause": 0.05},
                                args=(connection_settings(cfg), name, t, hi, stop_writes, seed))
               for t, lo, hi, seed in (("a", 300, 699, 1), ("b", 200, 499, 2))]
    t0 = time.monotonic()
    try:
        stream = wait(lambda: instance.get_runs(RunsFilter(job_name=STREAM_JOB, statuses=[DagsterRunStatus.STARTED])),
                      300, "the hand-off sensor to start the stream", daemon)[0]
        print(f"{time.monotonic() - t0:.0f} s: stream run started")
        for w in writers:
            w.start()
        done = {}
        for schedule in ("a_below_300", "b_repair"):
            done[schedule] = wait(lambda s=schedule: [r for r in scheduled_runs(instance, s) if r.is_finished], 360,
                                  f"the first run of {SCHEDULE_PREFIX}{schedule}", daemon)[-1]
            print(f"{time.monotonic() - t0:.0f} s: the first run of {schedule} finished")
        failed = wait(lambda: ticks(instance, "vanished", TickStatus.FAILURE), 120, "a failed tick of vanished", daemon)
        stop_writes.set()
        for w in writers:
            w.join()
        wait(lambda: all(d.equal for d in diff_tables(cfg, [a, b])), 120, "Delta to catch up with MySQL")
        assert instance.get_run_by_id(stream.run_id).status == DagsterRunStatus.STARTED  # the same stream run
        assert len(instance.get_runs(RunsFilter(job_name=STREAM_JOB))) == 1
    except BaseException:
        print((tmp_path / "daemon.log").read_text()[-30000:])  # what the daemon did, shown with the failure
        raise
    finally:
        stop_writes.set()
        stop_dagster(daemon)
        state.unlink(missing_ok=True)
    assert_equal(cfg, [a, b])

    a_run, b_run = done["a_below_300"], done["b_repair"]
    assert (a_run.status, b_run.status) == (DagsterRunStatus.SUCCESS, DagsterRunStatus.SUCCESS)
    assert a_run.job_name == "binlake_backfill" and a_run.tags[SCHEDULED_TAG] == "a_below_300"
    assert a_run.run_config == {"ops": {"backfill_table": {"config": {"tables": [{"table": a, "to_key": "300"}]}}}}
    assert b_run.job_name == "binlake_repair"
    assert b_run.run_config == {"ops": {"repair_chunks": {"config": {"tables": [b]}}}}
    requests = ControlStore.of(cfg).backfills()
    first_a = next(r for r in requests if r.table == a)
    assert (first_a.lo, first_a.hi, first_a.state) == (None, 300, BackfillState.DONE)
    assert first_a.rows >= 42  # at least the rows deleted (every 7th below 300)
    repairs = [r for r in requests if r.table == b and r.reason == "reconcile --repair"]
    assert repairs and all(r.state == BackfillState.DONE for r in repairs)
    damaged_range = [r for r in repairs if (r.lo is None or r.lo < 180) and (r.hi is None or 150 < r.hi)]
    assert sum(r.rows for r in damaged_range) >= 30  # the 20 rows deleted, the 10 changed
    assert {m["id"] for m in _merges(cfg, a)} <= {r.id for r in requests if r.table == a}
    assert all(m["id"] in {r.id for r in repairs} for m in _merges(cfg, b))

    message = failed[0].error.to_string()
    assert f"{name}.gone no longer on the source" in message, message
    assert rf"'{name}\\.never_.*': matches no captured table on the source" in message, message
    assert not scheduled_runs(instance, "vanished") and not scheduled_runs(instance, "stopped")
    assert not ticks(instance, "stopped")
