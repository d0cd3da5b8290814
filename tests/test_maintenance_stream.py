"""Lake maintenance with the stream (pipelines/lake/maintenance/), against the real MariaDB:

- under concurrent streaming and a random workload (inserts, updates, deletes, key moves,
  transactions; a keyed, a unique-keyed, a key-columns and a keyless table), with a small
  target, a short interval and no retention, compactions and vacuums run between batches and
  Delta still equals MySQL row by row, each table's stream commits carry strictly increasing
  offsets, and the changes they record equal the binlog's (tests/change_count.py);
- a vacuum's deletes run off the engine's thread: held inside them, the stream still commits
  batches; released, they finish and are recorded, and Delta equals MySQL;
- ``binlake maintain`` with no stream compacts and vacuums under the writer lock and prints what
  it did; handed to a running stream it is carried out there and waited for; ``binlake status``
  shows each table's files, bytes and last compaction and vacuum;
- SIGKILL with a compaction's files written and not committed, right after a compaction
  commit, and right after a vacuum's deletes: the restart leaves Delta equal to MySQL, counted.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

from deltalake import DeltaTable

from cdc_core.offset.stream_offset import OFFSET_KEY
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import MAINTENANCE_KEY, table_uri
from pipelines.stream import StreamEngine
from tests.change_count import assert_changes_counted
from tests.helpers import EngineThread, assert_equal, snapshot, write_config_file
from tests.test_stream_crash import (
    Stream,
    Writer,
    _shop,
    assert_commits_strictly_increase,
    replica_registered,
    run_stream,
    wait_for,
)

SEED = 20261127
# Files of ~20 KB for tables of a few hundred KB: compactions every few batches.
AGGRESSIVE = {"target_file_mb": 0.02, "interval_minutes": 0.05, "retention_hours": 0}


def _runs(cfg) -> list[dict]:
    store = ControlStore.of(cfg)
    return store._read("maintenance_runs")  # noqa: SLF001 - every run, not only the latest


@contextlib.contextmanager
def _streaming(mariadb, name: str, cfg, spark, seed: int):
    """A random writer on ``name``'s tables, the snapshot taken, then an engine streaming: yields
    (writer, engine); the writer is stopped at the end whatever happened."""
    writer = Writer(mariadb, name, seed, pace=0.02)
    writer.start()
    try:
        snapshot(cfg, spark)
        engine = EngineThread(StreamEngine(cfg))
        engine.start()
        engine.wait_streaming()
        yield writer, engine
    finally:
        writer.stop_event.set()
        writer.running.set()


def test_compaction_and_vacuum_under_concurrent_streaming(mariadb, db, spark, make_config, tmp_path):
    name, conn = db
    names, cfg, _ = _shop(conn, name, make_config, tmp_path, chunk_size=400)
    cfg = _maintained(cfg)
    with _streaming(mariadb, name, cfg, spark, SEED) as (writer, engine):
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:
            time.sleep(1)
            assert engine.is_alive(), engine.join()
        writer.stop()
        engine.stop()
    summary = StreamEngine(cfg, until_now=True).run()
    assert summary.stop_reason.startswith("reached")
    assert_equal(cfg, names)
    commits = {n: assert_commits_strictly_increase(cfg, n) for n in names}
    changes = assert_changes_counted(cfg, names, per_key=False)
    runs = _runs(cfg)
    compacted = {r["table"] for r in runs if r["kind"] == "compaction"}
    vacuumed = {r["table"] for r in runs if r["kind"] == "vacuum" and r["files_deleted"]}
    print(f"workload {dict(writer.ops)}; commits {commits}; changes {changes}; "
          f"{sum(r['kind'] == 'compaction' for r in runs)} compactions of {sorted(compacted)}, "
          f"{sum(r['kind'] == 'vacuum' for r in runs)} vacuums")
    assert len(compacted) >= 2 and vacuumed, (compacted, vacuumed)
    for n in vacuumed & set(names):
        assert _vacuums_in_log(cfg, n), n


def _vacuums_in_log(cfg, sink: str) -> list[dict]:
    """The vacuums that deleted files, as a data table's log records them: commits without offset."""
    marks = [json.loads(c[MAINTENANCE_KEY]) for c in DeltaTable(table_uri(cfg.sink.path, sink)).history()
             if MAINTENANCE_KEY in c and not c.get(OFFSET_KEY)]
    return [m for m in marks if m["kind"] == "vacuum" and m["files_deleted"] > 0]


def test_batches_commit_while_a_vacuum_deletes(mariadb, db, spark, make_config, tmp_path, monkeypatch):
    """A vacuum's deletes run in the maintenance's vacuum thread: with the first vacuum that has
    files to delete held inside its deletes (``vacuum.delete`` wrapped from here), the stream
    still commits batches; released, the deletes finish, the vacuum is recorded and Delta = MySQL."""
    from pipelines.lake.maintenance import vacuum

    name, conn = db
    names, cfg, _ = _shop(conn, name, make_config, tmp_path, chunk_size=400)
    cfg = _maintained(cfg)
    deleting, release, returned = threading.Event(), threading.Event(), threading.Event()
    held: list[vacuum.VacuumPlan] = []
    real = vacuum.delete

    def delete(planned, paths, stop=None):
        if paths and not held:
            held.append(planned)
            deleting.set()
            assert release.wait(120), "the test never released the vacuum"
            done = real(planned, paths, stop)
            returned.set()
            return done
        return real(planned, paths, stop)

    monkeypatch.setattr(vacuum, "delete", delete)
    with _streaming(mariadb, name, cfg, spark, SEED + 4) as (writer, engine):
        try:
            assert deleting.wait(90), "no vacuum with files to delete"
            before = _stream_commits(cfg, names)
            wait_for(lambda: _stream_commits(cfg, names) >= before + 3 or not engine.is_alive(), 60,
                     "stream commits while the vacuum deletes")
            assert engine.is_alive(), engine.join()
            assert not returned.is_set()  # the vacuum is still inside its deletes
            release.set()
            sink = held[0].sink
            wait_for(lambda: returned.is_set() and any(r["kind"] == "vacuum" and r["table"] == sink
                                                       and r["files_deleted"] for r in _runs(cfg)),
                     60, "the vacuum recorded")
            writer.stop()
            engine.stop()
        finally:
            release.set()  # a failure above must not leave the vacuum thread waiting
    assert not [p for p in held[0].deletable if (Path(held[0].uri) / p).exists()]  # every planned file deleted
    assert StreamEngine(cfg, until_now=True).run().stop_reason.startswith("reached")
    assert_equal(cfg, names)
    for n in names:
        assert_commits_strictly_increase(cfg, n)
    assert_changes_counted(cfg, names, per_key=False)


def _stream_commits(cfg, names) -> int:
    """The stream's commits to the tables ``names`` so far (those carrying a stream offset)."""
    return sum(1 for n in names for c in DeltaTable(table_uri(cfg.sink.path, n)).history() if c.get(OFFSET_KEY))


def _maintained(cfg, **overrides):
    m = {**AGGRESSIVE, **overrides}
    return cfg.model_copy(update={"sink": cfg.sink.model_copy(update={
        "maintenance": cfg.sink.maintenance.model_copy(update=m)})})


def _status(config, logs, password) -> dict:
    s = run_stream(config, logs, "--json", password=password, command="status", timeout=120)
    assert s.proc.returncode == 0, s.describe()
    return {t["sink"]: t["maintenance"] for t in json.loads(s.stdout)["tables"]}


def test_maintain_command_alone_and_handed_to_the_running_stream(mariadb, db, spark, make_config, tmp_path):
    name, conn = db
    names, cfg, _ = _shop(conn, name, make_config, tmp_path, chunk_size=400)
    cfg = _maintained(cfg, auto=False)  # only `binlake maintain` compacts and vacuums
    config = write_config_file(cfg, tmp_path / "maintained.yaml")
    logs, password = tmp_path / "logs", mariadb.password
    snapshot(cfg, spark)
    writer = Writer(mariadb, name, SEED + 1, pace=0.02)
    with mariadb.connect(name) as c, c.cursor() as cur:
        for _ in range(300):
            writer.step(cur)
    first = run_stream(config, logs, "--until", "now", password=password)
    assert first.proc.returncode == 0, first.describe()
    before = _status(config, logs, password)
    acct = names[0]
    assert before[acct]["live_files"] > 1 and before[acct]["last_compaction"] is None

    # No stream runs: maintain here, under the writer lock.
    alone = run_stream(config, logs, "--table", acct, password=password, command="maintain", timeout=120)
    assert alone.proc.returncode == 0, alone.describe()
    assert "this process" in alone.stdout and acct in alone.stdout, alone.describe()
    after = _status(config, logs, password)
    assert after[acct]["live_files"] < before[acct]["live_files"], (before[acct], after[acct])
    assert after[acct]["bytes_awaiting_vacuum"] == 0 and after[acct]["last_vacuum"] is not None
    assert _vacuums_in_log(cfg, acct)  # the compaction's inputs deleted (retention 0)
    assert after[acct]["last_compaction"]["did"].endswith(f"→ {after[acct]['live_files']} live files")
    assert after[names[1]]["last_compaction"] is None  # --table: that table only
    assert_equal(cfg, names)

    # A stream runs: the request is handed to it and waited for.
    with mariadb.connect(name) as c, c.cursor() as cur:
        for _ in range(200):
            writer.step(cur)
    s = Stream(config, logs, password=password)
    try:
        wait_for(lambda: replica_registered(mariadb, cfg.source.server_id) or not s.alive(), 60, "the stream")
        handed = run_stream(config, logs, password=password, command="maintain", timeout=180)
        assert handed.proc.returncode == 0, handed.describe()
        assert "the running stream" in handed.stdout, handed.describe()
        assert s.alive(), s.describe()
        assert s.terminate() == 0, s.describe()
    finally:
        s.kill()
    final = _status(config, logs, password)
    for n in names:
        assert final[n]["last_vacuum"] is not None and final[n]["bytes_awaiting_vacuum"] == 0, (n, final[n])
    assert_equal(cfg, names)
    assert_changes_counted(cfg, names, per_key=False)


def test_sigkill_during_compaction_and_vacuum(mariadb, db, spark, make_config, tmp_path):
    from tests.test_soak import SoakWriter, kill_paused

    name, conn = db
    names, cfg, _ = _shop(conn, name, make_config, tmp_path, chunk_size=400)
    cfg = _maintained(cfg)
    config = write_config_file(cfg, tmp_path / "maintained.yaml")
    logs, password = tmp_path / "logs", mariadb.password
    snapshot(cfg, spark)
    writer = SoakWriter(mariadb, name, SEED + 2, pace=0.02)
    writer.DDL_RATE = 0  # no schema changes: the kills land in maintenance, not in DDL
    writer.start()
    landed = []
    try:
        for point in ("compaction_rewritten", "compaction_committed", "vacuum_deleted", "compaction_rewritten:2"):
            writer.resume()
            where, _, n = point.partition(":")
            if kill_paused(config, logs, where, int(n or 1), password):
                landed.append(point)
            writer.quiesce()
            summary = StreamEngine(cfg, until_now=True).run()
            assert summary.stop_reason.startswith("reached"), summary.stop_reason
            assert_equal(cfg, names)
        writer.stop()
    finally:
        writer.stop_event.set()
        writer.running.set()
    assert StreamEngine(cfg, until_now=True).run().stop_reason.startswith("reached")  # what the writer did last
    assert set(landed) >= {"compaction_rewritten", "compaction_committed", "vacuum_deleted"}, landed
    for n in names:
        assert_commits_strictly_increase(cfg, n)
    assert_changes_counted(cfg, names, per_key=False)
    # What the kills left behind (a compaction's uncommitted files) goes with the next vacuum.
    done = run_stream(config, logs, password=password, command="maintain", timeout=120)
    assert done.proc.returncode == 0, done.describe()
    for n, m in _status(config, logs, password).items():
        assert m["bytes_awaiting_vacuum"] == 0, (n, m)
    assert_equal(cfg, names)


def test_maintenance_on_an_object_store(mariadb, db, spark, make_config, s3_sink, tmp_path):
    """The same on S3 (moto): compactions and vacuums between batches under streaming, then
    `maintain` alone; Delta equals MySQL, every change counted once, nothing left to vacuum."""
    from pipelines.lake.maintenance.maintainer import maintain_now, pipeline_tables
    from pipelines.lake.maintenance.vacuum import usage
    from pipelines.lake.tables import open_table, table_uri

    name, conn = db
    names, cfg, _ = _shop(conn, name, make_config, tmp_path, chunk_size=400)
    cfg = _maintained(cfg.model_copy(update={"sink": cfg.sink.model_copy(update=s3_sink)}))
    kinds: set[str] = set()
    with _streaming(mariadb, name, cfg, spark, SEED + 3) as (writer, engine):
        # At least 15 s of streaming, longer on a loaded machine (where the first batches, a
        # catch-up of what the writer did during the snapshot, take most of it): until the
        # stream has compacted and vacuumed between its batches.
        start = time.monotonic()
        while time.monotonic() - start < 15 or (kinds < {"compaction", "vacuum"} and time.monotonic() - start < 180):
            time.sleep(1)
            assert engine.is_alive(), engine.join()
            kinds = {r["kind"] for r in _runs(cfg)}
        writer.stop()
        engine.stop()
    assert StreamEngine(cfg, until_now=True).run().stop_reason.startswith("reached")
    assert_equal(cfg, names)
    runs = _runs(cfg)
    assert any(r["kind"] == "compaction" for r in runs) and any(r["kind"] == "vacuum" for r in runs), runs
    report = maintain_now(cfg, pipeline_tables(cfg))
    assert {r.table for r in report.tables} >= set(names)
    for n in names:
        dt = open_table(table_uri(cfg.sink.path, n), cfg.sink.storage_options)
        assert usage(dt, table_uri(cfg.sink.path, n), cfg.sink.storage_options).awaiting_vacuum == 0, n
    assert_equal(cfg, names)
    assert_changes_counted(cfg, names, per_key=False)
