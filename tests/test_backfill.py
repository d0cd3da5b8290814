"""Online backfill against a real MariaDB (cdc_core/chunks/incremental.py states the invariants):

- Delta damaged by hand (rows deleted, values changed, rows added) is restored by a
  backfill the running stream does while a writer updates, deletes and inserts rows in
  the very ranges being read; a backfill of a key range repairs only that range;
- a table added to the capture list (config change + restart) is backfilled by the
  stream without a re-snapshot, while another table streams and a writer changes it;
- tables entering by RENAME TABLE, and tables created while the stream was stopped,
  are backfilled; a DDL between a chunk's read and its merge makes it read again;
- SIGKILL of the stream at random points of a backfill (chunk reads, between a chunk
  and its merge, the merge commit), restarted each time: nothing lost or doubled (the
  stream commits' changes, counted, equal the binlog's: tests/change_count.py);
- a request with many chunks reads them in groups, several chunks at once (in threads of the
  stream process, or on Spark), the next group read while the one before waits and merges,
  while the stream runs under writes in the ranges being read; a SIGKILL between a group's
  read and its merges, and
  one among a group's merges, lose and double nothing; a group's chunks merge several per
  Delta commit (runs bounded by rows);
- the CLI: requests listed, paused, resumed, cancelled; bad input refused with exit 2.
Every test ends comparing Delta with MySQL row by row.
"""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import sys
import threading
import time

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from cdc_core.chunks.incremental import BackfillState
from cdc_core.chunks.reader import ChunkReader
from cdc_core.source.connection import connect, connection_settings
from pipelines.backfill.requests import change_state, request_backfill
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import table_uri
from pipelines.stream import StreamEngine
from pipelines.stream.online_backfill import BACKFILL_KEY
from tests.change_count import assert_changes_counted
from tests.helpers import EngineThread, assert_equal, diff_tables, snapshot, write_config_file
from tests.pause_points import MARKER
from tests.test_stream_crash import Stream, _env, wait_for

ROWS_SQL = ("INSERT INTO {t} (id, v, s) SELECT seq, seq % 1000, CONCAT('row-', seq) FROM seq_1_to_{n}")


def _table(cur, name: str, rows: int) -> None:
    cur.execute(f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, v INT NOT NULL, s VARCHAR(40))")
    if rows:
        cur.execute(ROWS_SQL.format(t=name, n=rows))


def _damage(cfg, name: str, ids: range, salt: int = 0) -> None:
    """Delete every 7th row of ``ids`` from Delta, change every 5th, and add rows MySQL never had."""
    dt = DeltaTable(table_uri(cfg.sink.path, name))
    dt.delete(f"id % 7 = 0 AND id >= {ids.start} AND id < {ids.stop}")
    dt.update(updates={"v": "-1"}, predicate=f"id % 5 = 0 AND id >= {ids.start} AND id < {ids.stop}")
    extra = dt.to_pyarrow_table().slice(0, 3)
    ids_extra = [ids.stop - 1_000_000 * (i + 1) - 10 * salt for i in range(3)]  # negative keys: rows MySQL never had
    extra = extra.set_column(extra.schema.get_field_index("id"), "id",
                             pa.array(ids_extra, extra.schema.field("id").type))
    write_deltalake(dt, extra, mode="append")


def _writer(settings, database: str, table: str, hi: int, stop: threading.Event, seed: int, *, lo: int = 1,
            pause: float = 0.002) -> list[int]:
    """Updates, deletes and inserts rows of ``table`` anywhere in ``[lo, hi]``, one every
    ``pause`` seconds or so, until ``stop``; returns the ids it touched."""
    rng = random.Random(seed)
    touched = []
    with connect(settings) as conn, conn.cursor() as cur:
        cur.execute(f"USE `{database}`")
        while not stop.is_set():
            k = rng.randint(lo, hi)
            op = rng.random()
            if op < 0.6:
                cur.execute(f"UPDATE {table} SET v = v + 1 WHERE id = %s", (k,))
            elif op < 0.8:
                cur.execute(f"DELETE FROM {table} WHERE id = %s", (k,))
            else:
                cur.execute(f"INSERT INTO {table} (id, v, s) VALUES (%s, 7, 'new') ON DUPLICATE KEY UPDATE v = 8",
                            (k,))
            touched.append(k)
            time.sleep(pause)
    return touched


@contextlib.contextmanager
def _writers(settings, database: str, **tables: tuple[int, int]):
    """:func:`_writer` threads on ``tables`` (name=(highest id, seed)) while the block runs;
    yields the ids each one touched, filled in when the block ends."""
    stop = threading.Event()
    touched: dict[str, list[int]] = {}
    threads = [threading.Thread(target=lambda t=t, hi=hi, seed=seed: touched.setdefault(
        t, _writer(settings, database, t, hi, stop, seed))) for t, (hi, seed) in tables.items()]
    for th in threads:
        th.start()
    try:
        yield touched
    finally:
        stop.set()
        for th in threads:
            th.join()


def _requests(cfg):
    return ControlStore.of(cfg).backfills()


def test_backfill_without_a_running_stream_repairs_delta(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        _table(cur, "acct", 5000)
    cfg = make_config(name, chunk_size=700)
    snapshot(cfg, spark)
    StreamEngine(cfg, until_now=True).run()
    table = f"{name}.acct"
    _damage(cfg, table, range(2000, 3000))
    _damage(cfg, table, range(4000, 4500))
    assert not diff_tables(cfg, [table])[0].equal

    # A key range: only [2000, 3000) is repaired (the damage above 4000 stays).
    req = request_backfill(cfg, table, "2000", "3000")
    StreamEngine(cfg, until_now=True).run()
    done = next(r for r in _requests(cfg) if r.id == req.id)
    assert done.state == BackfillState.DONE, done
    d = diff_tables(cfg, [table])[0]
    bad = {k[0] for k in d.missing} | {k[0] for k in d.extra} | {k[0] for k, *_ in d.different}
    assert bad and all(k >= 4000 or k < 0 for k in bad), sorted(bad)[:20]
    assert not any(2000 <= k < 3000 for k in bad)

    request_backfill(cfg, table)  # the whole table, negative keys included
    summary = StreamEngine(cfg, until_now=True).run()
    assert summary.stop_reason.startswith("reached")
    assert_equal(cfg, [table])
    assert all(r.state == BackfillState.DONE for r in _requests(cfg))


def test_backfill_of_a_string_key_in_a_case_insensitive_collation(db, spark, make_config):
    """Chunks of a string key are ranges in the column's collation; Delta's keys are placed in
    them as the server orders them (cdc_core/types/key_order.py), so a range backfill deletes
    exactly the rows of its range that MySQL no longer has."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE words (w VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, n INT)")
        cur.executemany("INSERT INTO words VALUES (%s, %s)",
                        [(f"{c}{i:03d}", i) for i, c in enumerate("aBcDeFgHiJ" * 40)])
    cfg = make_config(name, chunk_size=60)
    snapshot(cfg, spark)
    StreamEngine(cfg, until_now=True).run()
    table = f"{name}.words"
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")  # MySQL changes Delta does not see: Delta is now wrong
        cur.execute("DELETE FROM words WHERE n % 9 = 0")
        cur.execute("UPDATE words SET n = -n WHERE n % 4 = 0")
        cur.execute("SET SESSION sql_log_bin = 1")
    req = request_backfill(cfg, table, "c", "F")  # c…, D…, e… in the collation's order (F excluded)
    StreamEngine(cfg, until_now=True).run()
    assert next(r for r in _requests(cfg) if r.id == req.id).state == BackfillState.DONE
    d = diff_tables(cfg, [table])[0]
    wrong = {k[0] for k in d.missing} | {k[0] for k in d.extra} | {k[0] for k, *_ in d.different}
    assert wrong and not any(w[0].lower() in "cde" for w in wrong), sorted(wrong)
    request_backfill(cfg, table)
    StreamEngine(cfg, until_now=True).run()
    assert_equal(cfg, [table])


def test_a_backfill_of_many_column_types_writes_only_the_rows_delta_holds_otherwise(db, spark, make_config):
    """A composite key (integer, binary) and columns of most types, NULLs in each: a backfill
    of a table Delta holds as MySQL does writes nothing; after one row changed and one
    deleted in Delta, it upserts the one and appends the other, and Delta equals MySQL."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE typed (id INT, tag VARBINARY(8), d DECIMAL(10,2), f DOUBLE, b BLOB, "
                    "dt DATETIME(3), ts TIMESTAMP(6) NULL, dd DATE, tm TIME, j JSON, e ENUM('x','y'), "
                    "st SET('p','q'), g GEOMETRY, u BIGINT UNSIGNED, PRIMARY KEY (id, tag))")
        cur.execute("INSERT INTO typed SELECT seq, IF(seq % 2, 'a', X'00FF'), seq / 4, seq / 3, REPEAT('z', seq % 5), "
                    "'2024-02-29 12:00:00.125', '2024-01-01 00:00:00.5', '2024-02-29', '-01:02:03', "
                    "JSON_OBJECT('k', seq), IF(seq % 2, 'x', 'y'), 'p,q', POINT(seq, 1), 18446744073709551615 - seq "
                    "FROM seq_1_to_300")
        cur.execute("UPDATE typed SET d = NULL, f = NULL, b = NULL, dt = NULL, ts = NULL, dd = NULL, tm = NULL, "
                    "j = NULL, e = NULL, st = NULL, g = NULL, u = NULL WHERE id % 3 = 0")
    cfg = make_config(name, chunk_size=70)
    snapshot(cfg, spark)
    StreamEngine(cfg, until_now=True).run()
    table = f"{name}.typed"
    request_backfill(cfg, table)
    StreamEngine(cfg, until_now=True).run()
    assert _merges(cfg, table) == []  # every row held as it is: no chunk's merge commits

    dt = DeltaTable(table_uri(cfg.sink.path, table))
    dt.update(updates={"d": "7.25"}, predicate="id = 10")
    dt.delete("id = 20")
    request_backfill(cfg, table)
    StreamEngine(cfg, until_now=True).run()
    again = _merges(cfg, table)
    assert [sum(m[k] for m in again) for k in ("appended", "upserted", "deleted")] == [1, 1, 0], again
    assert_equal(cfg, [table])


def test_backfill_under_writes_hands_off_to_the_running_stream(db, spark, make_config, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        _table(cur, "acct", 20_000)
        _table(cur, "other", 100)
    cfg = make_config(name, chunk_size=2500, stream={"max_batch_rows": 500, "max_batch_seconds": 0.3})
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    snapshot(cfg, spark)
    table = f"{name}.acct"
    _damage(cfg, table, range(1, 20_000))
    settings = connection_settings(cfg)
    stream = Stream(config, tmp_path / "logs", password=cfg.source.password.get_secret_value())
    with _writers(settings, name, acct=(20_000, 1), other=(100, 2)) as touched:
        wait_for(lambda: ControlStore.of(cfg).checkpoint() is not None, 60, "the stream's first checkpoint")
        cli = subprocess.run([sys.executable, "-m", "pipelines.cli", "backfill", "-c", config, "--table", table],
                             capture_output=True, text=True, timeout=300, env=_env(cfg.source.password
                                                                                 .get_secret_value()))
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert ": done " in cli.stdout, cli.stdout
        time.sleep(1.0)  # changes after the backfill's last high watermark, applied on top of it
    assert len(touched["acct"]) > 100
    try:
        wait_for(lambda: all(d.equal for d in diff_tables(cfg, [table, f"{name}.other"])), 60,
                 "Delta to catch up with MySQL")
    finally:
        assert stream.terminate() == 0, stream.describe()
    assert_equal(cfg, [table, f"{name}.other"])
    merges = _merges(cfg, table)
    assert merges and sum(m["left_to_stream"] for m in merges) > 0, merges  # the writer hit the windows


def test_reconcile_repair_restores_damaged_delta_while_the_stream_runs_under_writes(db, spark, make_config,
                                                                                     tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        _table(cur, "acct", 12_000)
    cfg = make_config(name, chunk_size=1000, stream={"max_batch_rows": 500, "max_batch_seconds": 0.3})
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    snapshot(cfg, spark)
    table = f"{name}.acct"
    _damage(cfg, table, range(3000, 5000))  # chunks 3 and 4 of 12 (and the extra keys' first chunk)
    env = {**_env(cfg.source.password.get_secret_value()), "COLUMNS": "200"}
    settings = connection_settings(cfg)
    stream = Stream(config, tmp_path / "logs", password=cfg.source.password.get_secret_value())
    wait_for(lambda: ControlStore.of(cfg).checkpoint() is not None, 60, "the stream's first checkpoint")
    with _writers(settings, name, acct=(12_000, 9)):
        r = subprocess.run([sys.executable, "-m", "pipelines.cli", "reconcile", "-c", config, "--repair"],
                           capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "differing chunks requested" in r.stdout, r.stdout
    try:
        wait_for(lambda: diff_tables(cfg, [table])[0].equal, 60, "Delta to catch up with MySQL", interval=0.5)
    finally:
        assert stream.terminate() == 0, stream.describe()
    assert_equal(cfg, [table])
    repaired = set(_chunks_merged(_merges(cfg, table)))
    assert repaired and all(r.reason == "reconcile --repair" for r in _requests(cfg))
    again = subprocess.run([sys.executable, "-m", "pipelines.cli", "reconcile", "-c", config], capture_output=True,
                           text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stdout + again.stderr


def _merges(cfg, table: str) -> list[dict]:
    """The backfill merges committed to ``table`` (their commit metadata), oldest first."""
    out = []
    for commit in reversed(DeltaTable(table_uri(cfg.sink.path, table)).history()):
        raw = commit.get(BACKFILL_KEY)
        if raw:
            out.append(json.loads(raw) if isinstance(raw, str) else raw)
    return out


def _chunks_merged(merges: list[dict]) -> list[int]:
    """The chunks the merge commits ``merges`` hold, in commit order (a commit may hold several)."""
    return [c for m in merges for c in m["chunks"]]


def test_table_added_to_the_capture_list_is_backfilled_while_another_streams(db, spark, make_config, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        _table(cur, "other", 1000)
        _table(cur, "big", 100_000)
    first = make_config(name, chunk_size=20_000, source={"tables": [rf"{name}\.other"]},
                        stream={"max_batch_rows": 2000, "max_batch_seconds": 0.3})
    snapshot(first, spark)
    StreamEngine(first, until_now=True).run()
    # The config now captures big too: a restart backfills it, without a re-snapshot.
    cfg = first.model_copy(update={"source": first.source.model_copy(update={"tables": [rf"{name}\..*"]})})
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    settings = connection_settings(cfg)
    big = f"{name}.big"
    with _writers(settings, name, big=(100_000, 3), other=(1000, 4)) as touched:
        stream = Stream(config, tmp_path / "logs", password=cfg.source.password.get_secret_value())
        wait_for(lambda: any(r.table == big and r.state == BackfillState.DONE for r in _requests(cfg)), 240,
                 "the backfill of the added table", interval=0.5)
        time.sleep(1.0)
    try:
        wait_for(lambda: all(d.equal for d in diff_tables(cfg, [big, f"{name}.other"])), 90,
                 "Delta to catch up with MySQL", interval=1.0)
    finally:
        assert stream.terminate() == 0, stream.describe()
    assert_equal(cfg, [big, f"{name}.other"])
    assert len(touched["big"]) > 100
    status = subprocess.run([sys.executable, "-m", "pipelines.cli", "status", "-c", config],
                            capture_output=True, text=True, timeout=120, env={**_env(
                                cfg.source.password.get_secret_value()), "COLUMNS": "250"})
    assert "needs backfill" not in status.stdout and "big" in status.stdout, status.stdout


def test_tables_renamed_in_or_created_while_stopped_are_backfilled(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        _table(cur, "acct", 3000)
        _table(cur, "staging", 0)
    cfg = make_config(name, chunk_size=1000, source={"exclude_tables": [rf"{name}\.staging"]})
    snapshot(cfg, spark)
    StreamEngine(cfg, until_now=True).run()
    with conn.cursor() as cur:
        cur.execute(ROWS_SQL.format(t="staging", n=2500))
        cur.execute("RENAME TABLE staging TO loaded")  # enters the capture with rows Delta never saw
        _table(cur, "early", 0)
        cur.execute(ROWS_SQL.format(t="early", n=1200))
    StreamEngine(cfg, until_now=True).run()  # sees the RENAME and early's CREATE: early is captured from it
    with conn.cursor() as cur:
        cur.execute("UPDATE loaded SET v = v + 1 WHERE id % 3 = 0")
        cur.execute("DELETE FROM loaded WHERE id % 11 = 0")
    summary = StreamEngine(cfg, until_now=True).run()
    assert summary.stop_reason.startswith("reached")
    tables = [f"{name}.{t}" for t in ("acct", "loaded", "early")]
    assert_equal(cfg, tables)
    # Created while the stream was stopped: its CREATE is read from the binlog, captured from creation.
    with conn.cursor() as cur:
        _table(cur, "later", 1500)
    StreamEngine(cfg, until_now=True).run()
    assert_equal(cfg, [*tables, f"{name}.later"])
    reasons = {r.table: r.reason for r in _requests(cfg) if r.state == BackfillState.DONE}
    assert f"{name}.loaded" in reasons and f"{name}.acct" not in reasons, reasons


def test_a_ddl_binlake_never_read_is_found_at_start_and_backfilled(db, spark, make_config):
    """A DDL run while the stream was stopped, with ``sql_log_bin=0`` (so not in the binlog):
    the table's live schema differs from its schema where the stream resumes; it is adopted
    and the table backfilled, so the existing rows get the new column's values."""
    name, conn = db
    with conn.cursor() as cur:
        _table(cur, "acct", 2000)
        _table(cur, "quiet", 50)
    cfg = make_config(name, chunk_size=700)
    snapshot(cfg, spark)
    StreamEngine(cfg, until_now=True).run()
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("ALTER TABLE acct ADD COLUMN extra INT NOT NULL DEFAULT 7")
        cur.execute("SET SESSION sql_log_bin = 1")
    StreamEngine(cfg, until_now=True).run()
    tables = [f"{name}.acct", f"{name}.quiet"]
    assert_equal(cfg, tables)
    assert [r.table for r in _requests(cfg)] == [f"{name}.acct"]
    history = ControlStore.of(cfg).schema_history()
    assert any(e.table == f"{name}.acct" and e.status == "diverged" and e.needs_backfill for e in history)


def test_a_ddl_between_a_chunk_read_and_its_merge_reads_it_again(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        _table(cur, "acct", 4000)
    cfg = make_config(name, chunk_size=1000)
    snapshot(cfg, spark)
    StreamEngine(cfg, until_now=True).run()
    table = f"{name}.acct"
    _damage(cfg, table, range(1, 4000))
    request_backfill(cfg, table)
    engine = StreamEngine(cfg, until_now=True)
    original = engine._start

    def start_then_alter():
        original()
        engine.backfills.poll(force=True)
        engine._step_backfills()  # the first chunk is read; then a DDL and writes before its high watermark
        assert engine.backfills.inflight
        with conn.cursor() as cur:
            cur.execute("ALTER TABLE acct ADD COLUMN extra INT DEFAULT 5")
            cur.execute("UPDATE acct SET extra = id WHERE id < 600")

    engine._start = start_then_alter
    engine.run()
    assert_equal(cfg, [table])
    merged = _chunks_merged(_merges(cfg, table))
    assert sorted(set(merged)) == list(range(len(set(merged)))) and merged.count(0) == 1, merged


def test_cli_lists_pauses_resumes_and_cancels(db, make_config, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        _table(cur, "acct", 10)
        cur.execute("CREATE TABLE nokey (v INT)")
    cfg = make_config(name)
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    env = _env(cfg.source.password.get_secret_value())

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipelines.cli", "backfill", "-c", config, *args],
                              capture_output=True, text=True, timeout=120, env={**env, "COLUMNS": "200"})

    r = cli("--table", f"{name}.acct", "--from", "3", "--to", "8", "--no-wait")
    assert r.returncode == 0, r.stderr
    rid = r.stdout.split()[1]
    assert "[3, 8)" in r.stdout
    assert cli("--pause", rid).returncode == 0
    listed = cli("--list")
    assert rid in listed.stdout and "paused" in listed.stdout, listed.stdout
    assert cli("--resume", rid).returncode == 0
    assert [q.state for q in _requests(cfg) if q.id == rid] == [BackfillState.PENDING]
    assert cli("--cancel", rid).returncode == 0
    again = cli("--cancel", rid)
    assert again.returncode == 2 and "cancelled" in again.stderr, again.stderr
    for args, words in ((("--table", f"{name}.missing"), "does not exist"),
                        (("--table", f"{name}.nokey"), "no row key"),
                        (("--table", "elsewhere.t"), "not captured"),
                        (("--table", f"{name}.acct", "--from", "x"), "not a value"),
                        (("--cancel", "nope"), "no backfill request")):
        r = cli(*args)
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_sigkill_during_backfills_loses_and_doubles_nothing(db, spark, make_config, tmp_path):
    """Ten kills at random instants of backfills under writes (chunk reads, between a chunk and
    its merge, merge commits), each followed by a restart; then Delta equals MySQL."""
    name, conn = db
    with conn.cursor() as cur:
        _table(cur, "acct", 30_000)
    cfg = make_config(name, chunk_size=1500, stream={"max_batch_rows": 300, "max_batch_seconds": 0.2})
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    snapshot(cfg, spark)
    table = f"{name}.acct"
    rng = random.Random(20261123)
    settings = connection_settings(cfg)
    kills = 0
    with _writers(settings, name, acct=(30_000, 5)):
        for round_ in range(3):
            _damage(cfg, table, range(1, 30_000), round_)
            request_backfill(cfg, table)
            for _ in range(4):
                if kills == 10:
                    break
                stream = Stream(config, tmp_path / "logs", password=cfg.source.password.get_secret_value())
                wait_for(lambda s=stream: not s.alive() or any(r.state == BackfillState.RUNNING
                                                               for r in _requests(cfg)), 60, "a running backfill")
                time.sleep(rng.uniform(0.2, 2.5))
                stream.kill()
                kills += 1
    assert kills == 10
    StreamEngine(cfg, until_now=True).run()
    assert all(r.state == BackfillState.DONE for r in _requests(cfg)), _requests(cfg)
    assert_equal(cfg, [table])
    assert_changes_counted(cfg, [table])


def _damaged_acct(db, spark, make_config, rows: int, group_rows: int, runner: str = "auto"):
    """A snapshotted table ``acct`` of ``rows`` rows damaged in Delta, under a config whose
    backfills read groups of 1,000-row chunks (``group_rows`` rows per read slot) where
    ``runner`` puts them (auto: threads of the stream process, on the tests' local master)."""
    name, conn = db
    with conn.cursor() as cur:
        _table(cur, "acct", rows)
    cfg = make_config(name, source={"snapshot": {"chunk_size": 1000, "backfill_spark_min_chunks": 4,
                                                                  "backfill_group_rows": group_rows,
                                                                  "runner": runner}},
                      stream={"max_batch_rows": 500, "max_batch_seconds": 0.3})
    snapshot(cfg, spark)
    table = f"{name}.acct"
    _damage(cfg, table, range(1, rows))
    return name, cfg, table


def _backfilled_under_writes(cfg, stream: StreamEngine, name: str, short: str, rows: int, seed: int):
    """``stream`` running in a thread while a writer changes rows of ``name.short`` (ids 1 to
    ``rows``): a backfill of the table requested and done, Delta caught up with MySQL and
    compared with it row by row. Returns the request as it ended."""
    table = f"{name}.{short}"
    engine = EngineThread(stream)
    engine.start()
    engine.wait_streaming()
    with _writers(connection_settings(cfg), name, **{short: (rows, seed)}) as touched:
        req = request_backfill(cfg, table)
        wait_for(lambda: next(r for r in _requests(cfg) if r.id == req.id).state == BackfillState.DONE, 240,
                 "the backfill", interval=0.2)
    try:
        wait_for(lambda: diff_tables(cfg, [table])[0].equal, 60, "Delta to catch up with MySQL", interval=0.5)
    finally:
        engine.stop()
    assert_equal(cfg, [table])
    assert len(touched[short]) > 100
    return next(r for r in _requests(cfg) if r.id == req.id)


def test_large_backfill_reads_groups_of_chunks_on_spark_under_writes(db, spark, make_config):
    """Chunks read in parallel on Spark (the test's session, found in the process), merged by
    the running stream while a writer updates, deletes and inserts rows in the very ranges
    being read: Delta equals MySQL, and the writer's changes made while the backfill ran (it
    stops when the backfill is done: many rows' last change is one) are not reverted."""
    name, cfg, table = _damaged_acct(db, spark, make_config, 24_000, 2000, runner="spark")
    stream = StreamEngine(cfg)
    in_flight: list[int] = []  # read groups in flight after each step
    start = stream._start

    def start_counting_groups():
        start()
        step = stream._step_backfills

        def counted(**how):
            step(**how)
            in_flight.append(len(stream.backfills.inflight))
        stream._step_backfills = counted

    stream._start = start_counting_groups
    req = _backfilled_under_writes(cfg, stream, name, "acct", 24_000, 11)
    merges = _merges(cfg, table)
    planned = len(req.chunks)
    assert planned > 20 and sorted(_chunks_merged(merges)) == list(range(planned)), merges  # each once
    groups: dict[int, list[dict]] = {}
    for m in merges:
        groups.setdefault(m["group"], []).append(m)
    several = [ms for ms in groups.values() if ms[0]["group_chunks"] > 1]
    assert any(ms[0]["on_spark"] for ms in several), merges  # several chunks per read step, on Spark
    for ms in several:  # a group's chunks, all merged, in order, at the group's one high watermark
        first, n = ms[0]["group"], ms[0]["group_chunks"]
        assert _chunks_merged(ms) == list(range(first, first + n)), ms
        assert len({json.dumps(m["high_watermark"]) for m in ms}) == 1, ms
    assert sum(m["left_to_stream"] for m in merges) > 0, merges  # the writer hit the windows
    assert max(in_flight) == 2  # the next group read while the one before waited for its merges


def test_chunks_read_at_once_land_exactly_under_writes(db, spark, make_config, monkeypatch):
    """With the local runner (auto on the tests' local master: Spark is never started for it),
    a large request's chunks are read several at once in threads of the stream process, each
    between its own watermarks, while a writer updates, deletes and inserts rows in the very
    ranges being read: reads overlap in time, every chunk merges exactly once in the plan's
    order, the writer's changes inside the chunks' windows are left to the stream, and Delta
    equals MySQL row by row."""
    name, cfg, table = _damaged_acct(db, spark, make_config, 24_000, 2000)
    reads: list[tuple[float, float]] = []  # each chunk SELECT's start and end, as it ran
    select = ChunkReader.select

    def timed(self, schema, chunk):
        began = time.monotonic()
        try:
            return select(self, schema, chunk)
        finally:
            reads.append((began, time.monotonic()))
    monkeypatch.setattr(ChunkReader, "select", timed)
    stream = StreamEngine(cfg)
    done = _backfilled_under_writes(cfg, stream, name, "acct", 24_000, 17)
    assert stream.backfills._reads.local and stream.backfills._reads._session is None  # no Spark started
    planned = len(done.chunks)
    merges = _merges(cfg, table)
    assert planned > 20 and _chunks_merged(merges) == list(range(planned)), merges  # each once, in order
    assert not any(m["on_spark"] for m in merges) and max(m["group_chunks"] for m in merges) == 4, merges
    at_once = max(sum(1 for b, e in reads if b <= t < e) for t, _ in reads)
    assert at_once >= 2, reads  # parallelism 2: chunk SELECTs overlapped
    assert sum(m["left_to_stream"] for m in merges) > 0, merges  # the writer hit the windows


def test_a_read_group_merges_several_chunks_per_commit(db, spark, make_config):
    """A read group's chunks merge in runs of whole chunks, one Delta commit per run, bounded by
    ``backfill_group_rows`` (4,000 rows: at most four 1,000-row chunks), while a writer changes
    rows in the ranges being read: each chunk merged exactly once, in order, each commit's chunks
    consecutive and of one group, fewer commits than chunks, the request's progress counting
    every chunk, and Delta equal to MySQL row by row."""
    name, cfg, table = _damaged_acct(db, spark, make_config, 16_000, 4000)
    done = _backfilled_under_writes(cfg, StreamEngine(cfg), name, "acct", 16_000, 13)
    planned = len(done.chunks)
    assert planned >= 16 and done.chunks_done == planned, done
    merges = _merges(cfg, table)
    assert sorted(_chunks_merged(merges)) == list(range(planned)), merges  # each chunk once
    assert _chunks_merged(merges) == list(range(planned)), merges  # in the plan's order
    for m in merges:  # whole, consecutive chunks of one read group, at most the rows bound
        first, n = m["chunks"][0], len(m["chunks"])
        assert m["chunk"] == first and m["chunks"] == list(range(first, first + n)), m
        assert m["group"] <= first and first + n <= m["group"] + m["group_chunks"] and n <= 4, m  # ~1,000 rows each
    assert any(len(m["chunks"]) > 1 for m in merges), merges  # several chunks landed in one commit
    assert len(merges) < planned, merges
    assert sum(m["left_to_stream"] for m in merges) > 0, merges  # the writer hit the windows


def _paused(config: str, logs, password: str, point: str) -> None:
    """A ``binlake stream`` run SIGKILLed at ``point`` (tests/pause_points.py), once it is there."""
    s = Stream(config, logs, password=password, pause=point)
    try:
        wait_for(lambda: MARKER in s.stderr or not s.alive(), 240, f"the stream to reach {point}", interval=0.05)
        assert s.alive() and MARKER in s.stderr, s.describe()
    finally:
        s.kill()


def test_sigkill_between_a_group_read_and_its_merges_loses_and_doubles_nothing(db, spark, make_config, tmp_path):
    """``binlake stream`` processes (reading several chunks at once in threads) SIGKILLed once
    when a read group is back and none of it is merged, once when the next group is being read
    while the one before waits for its merges, then at a later merge; a last run finishes the
    backfill."""
    name, conn = db
    with conn.cursor() as cur:
        _table(cur, "acct", 30_000)
    cfg = make_config(name, source={"snapshot": {"chunk_size": 1000, "backfill_spark_min_chunks": 4,
                                                                  "backfill_group_rows": 2000}},
                      stream={"max_batch_rows": 500, "max_batch_seconds": 0.3})
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    password = cfg.source.password.get_secret_value()
    snapshot(cfg, spark)
    table = f"{name}.acct"
    _damage(cfg, table, range(1, 30_000))
    req = request_backfill(cfg, table)
    with _writers(connection_settings(cfg), name, acct=(30_000, 12)):
        _paused(config, tmp_path / "logs", password, "backfill_group_read")
        _paused(config, tmp_path / "logs", password, "backfill_read_ahead")  # a group read, the next reading
        _paused(config, tmp_path / "logs", password, "backfill_merged:6")
    StreamEngine(cfg, until_now=True).run()
    assert all(r.state == BackfillState.DONE for r in _requests(cfg)), _requests(cfg)
    assert_equal(cfg, [table])
    assert_changes_counted(cfg, [table])
    planned = len(next(r for r in _requests(cfg) if r.id == req.id).chunks)
    assert set(_chunks_merged(_merges(cfg, table))) == set(range(planned))  # the killed group's, read again


def test_a_paused_request_drops_the_group_spark_is_reading(db, spark, make_config):
    """Pausing a request while Spark reads one of its groups drops the whole group unmerged;
    once resumed, the request reads it again and Delta equals MySQL."""
    name, conn = db
    with conn.cursor() as cur:
        _table(cur, "acct", 8000)
    cfg = make_config(name, source={"snapshot": {"chunk_size": 1000, "backfill_spark_min_chunks": 4,
                                                                  "backfill_group_rows": 2000, "runner": "spark"}})
    snapshot(cfg, spark)
    StreamEngine(cfg, until_now=True).run()
    table = f"{name}.acct"
    _damage(cfg, table, range(1, 8000))
    req = request_backfill(cfg, table)
    engine = StreamEngine(cfg, until_now=True)
    original = engine._start

    def start_then_pause():
        original()
        backfills = engine.backfills
        backfills.poll(force=True)
        wait_for(lambda: backfills._reads.slots() is not None, 60, "Spark")  # the test's session, found
        engine._step_backfills()  # the first group: chunks 0-3 on Spark
        assert [len(f.chunks) for f in backfills.inflight] == [4]
        change_state(cfg, req.id, BackfillState.PAUSED)
        backfills.poll(force=True)
        assert backfills.inflight == []
        change_state(cfg, req.id, BackfillState.PENDING)  # resumed: this run finishes it
        backfills.poll(force=True)

    engine._start = start_then_pause
    engine.run()
    assert next(r for r in _requests(cfg) if r.id == req.id).state == BackfillState.DONE
    assert_equal(cfg, [table])
    merges = _merges(cfg, table)
    merged = _chunks_merged(merges)
    assert sorted(merged) == list(range(len(merged))), merges  # each chunk once
