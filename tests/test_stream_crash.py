"""The stream under faults, run as a user runs it (``binlake stream`` in a subprocess):

- SIGKILL at random instants (startup, MERGE, checkpoint commit, inside transactions
  split across batches) under a random workload, restarted each time: nothing lost,
  nothing applied twice (Delta equals MySQL row by row, every update also bumps a
  ``counter`` column, each table's stream commits carry strictly increasing offsets and
  Delta transaction versions, and the changes they record, summed over every run, equal
  the binlog's changes from the stream's start: tests/change_count.py); one table has a
  primary key, one only a NOT NULL unique key, one only configured key columns
  (source.key_columns) and one no key at all (duplicate rows, one copy of several
  updated or deleted);
- a SIGKILL of the main process alone (the reader process survives it) must not keep
  the server_id busy for the restart;
- the source server restarting (clean stop and crash) mid-stream: the stream
  reconnects and catches up, every change counted once (the crash lands inside a
  transaction of 80,000 rows);
- binlog rotation (FLUSH BINARY LOGS) between writes while streaming;
- a purged resume position: exit 2, one line saying so and what to do; then ``binlake
  resync`` restarts at the binlog end and backfills the table online: Delta equals MySQL
  again, the rows only the purged binlog had included, the table's history kept;
- a server_id already in use by a running stream, or equal to the source's own:
  exit 2, one line naming server_id; the running stream is undisturbed.

Set BINLAKE_CRASH_SEED to replay another kill schedule and workload.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from cdc_core.config import BinlakeConfig, parse_config
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.offset.stream_offset import OFFSET_KEY, StreamOffset, app_id
from devtools.local_mariadb import LocalMariaDB
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import table_uri
from pipelines.stream.online_backfill import BACKFILL_KEY
from pipelines.stream.reader import proc_stat
from tests import pause_points
from tests.change_count import assert_changes_counted
from tests.helpers import (
    PASSWORD_VAR,
    assert_equal,
    batches_as_set,
    diff_tables,
    snapshot,
    wait_for,
    write_config_file,
)

SEED_VAR = "BINLAKE_CRASH_SEED"  # a failure shows the seed (tests/conftest.py)
SEED = int(os.environ.get(SEED_VAR, "20240611"))
STREAM = {"max_batch_rows": 500, "max_batch_seconds": 0.5}


# --- processes ------------------------------------------------------------------------------

def _env(password: str) -> dict:
    return {**os.environ, PASSWORD_VAR: password, "COLUMNS": "200"}


class Stream:
    """One ``binlake stream`` process (or another ``command``) in its own session (so a kill
    reaches its reader, or its Spark JVM, too); ``env``: extra environment variables;
    ``pause``: ``<point>[:<n>]``, where it waits to be killed (tests/pause_points.py)."""

    count = itertools.count()

    def __init__(self, config: str, log_dir: Path, *args: str, password: str, command: str = "stream",
                 env: dict | None = None, pause: str | None = None):
        n = next(self.count)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.out_path, self.err_path = log_dir / f"{command}-{n}.out", log_dir / f"{command}-{n}.err"
        self.args = (command, *args)
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            binlake = pause_points.command(pause) if pause else [sys.executable, "-m", "pipelines.cli"]
            self.proc = subprocess.Popen([*binlake, command, "-c", config, *args],
                                         stdout=out, stderr=err, env={**_env(password), **(env or {})},
                                         start_new_session=True)

    @property
    def stdout(self) -> str:
        return self.out_path.read_text()

    @property
    def stderr(self) -> str:
        return self.err_path.read_text()

    def describe(self) -> str:
        return f"binlake {' '.join(self.args)} exited {self.proc.returncode}:\n{self.stdout}\n{self.stderr}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (the engine and its reader process)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def terminate(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)


def run_stream(config: str, log_dir: Path, *args: str, password: str, timeout: float = 180,
               command: str = "stream") -> Stream:
    s = Stream(config, log_dir, *args, password=password, command=command)
    try:
        s.wait(timeout)
    except subprocess.TimeoutExpired:
        s.kill()
        pytest.fail(f"binlake stream {' '.join(args)} did not finish in {timeout} s:\n{s.stdout}\n{s.stderr}")
    return s


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def replica_registered(server, server_id: int) -> bool:
    with server.connect() as c, c.cursor() as cur:
        cur.execute("SHOW SLAVE HOSTS")
        return any(int(r[0]) == server_id for r in cur.fetchall())


def tables_equal(cfg: BinlakeConfig, names: list[str]) -> bool:
    try:
        return all(d.equal for d in diff_tables(cfg, names))
    except TableNotFoundError:  # the stream has not created it yet
        return False


# --- what the stream committed ----------------------------------------------------------------

def _log_versions(uri: str, since: int = 0) -> list[tuple[int, list[dict]]]:
    """(version, actions) of every JSON commit in the table's Delta log from ``since`` on, oldest first."""
    out = []
    for f in sorted((Path(uri) / "_delta_log").glob("*.json")):
        if int(f.stem) >= since:
            out.append((int(f.stem), [json.loads(line) for line in f.read_text().splitlines() if line.strip()]))
    return out


def assert_commits_strictly_increase(cfg: BinlakeConfig, name: str, since: int = 0) -> int:
    """No double apply: each stream commit of the table carries exactly one transaction of
    the pipeline's app id, whose version is its offset's applied position, and both
    strictly increase from commit to commit (a backfill merge carries the offset of the
    batch committed before it: pipelines/stream/online_backfill.py; it is never behind it).
    ``since``: only the commits from that version on (tests/test_soak.py checks each restart's).
    Returns the number of stream commits, backfill merges left out."""
    uri, app = table_uri(cfg.sink.path, name), app_id(cfg.pipeline.name)
    dt = DeltaTable(uri)
    # The commit metadata, as a reader sees it.
    history = sorted(dt.history(dt.version() + 1 - since), key=lambda c: c["version"])
    offsets = [(c["version"], StreamOffset.from_json(c[OFFSET_KEY])) for c in history if c.get(OFFSET_KEY)]
    merges = {c["version"] for c in history if c.get(BACKFILL_KEY)}
    for (v0, a), (v1, b) in itertools.pairwise(offsets):
        assert b.applied > a.applied or (v1 in merges and b.applied == a.applied), (
            f"{name}: commit {v1} applies through {b.applied}, not after commit {v0}'s {a.applied}: a change was "
            "applied twice")
        assert b.resume <= b.applied
    # The transaction identifiers, as the log stores them.
    prev = None
    by_version = dict(offsets)
    for version, actions in _log_versions(uri, since):
        txns = [a["txn"] for a in actions if "txn" in a and a["txn"]["appId"] == app]
        if version not in by_version:
            assert not txns, f"{name}: commit {version} has a stream transaction but no offset metadata"
            continue
        assert len(txns) == 1, f"{name}: commit {version} carries {len(txns)} transactions of {app}"
        assert txns[0]["version"] == by_version[version].applied.seq(), f"{name}: commit {version}"
        assert prev is None or txns[0]["version"] > prev or (version in merges and txns[0]["version"] == prev), (
            f"{name}: commit {version} has transaction version {txns[0]['version']}, not above {prev}")
        prev = txns[0]["version"]
    if offsets:
        assert dt.transaction_version(app) == offsets[-1][1].applied.seq()
        cp = ControlStore(cfg.sink.path, cfg.pipeline.name).checkpoint()
        assert cp is not None and cp.offset.applied >= offsets[-1][1].applied, \
            f"{name}: the final checkpoint {cp and cp.offset.applied} is behind the table's last commit"
    return len(offsets) - len(merges)


def stream_commit_count(cfg: BinlakeConfig, names: list[str]) -> int:
    total = 0
    for n in names:
        p = Path(table_uri(cfg.sink.path, n)) / "_delta_log"
        for f in p.glob("*.json"):
            if OFFSET_KEY in f.read_text():
                total += 1
    return total


# --- workload ------------------------------------------------------------------------------------

SCHEMA = (
    "CREATE TABLE acct (id INT PRIMARY KEY, counter INT NOT NULL DEFAULT 0, name VARCHAR(40), "
    "balance DECIMAL(14,2), seen DATETIME(6))",
    # No key the server knows of: its rows are identified by source.key_columns (workload_keys).
    "CREATE TABLE orders (id BIGINT NOT NULL, acct_id INT, counter INT NOT NULL DEFAULT 0, "
    "amount DECIMAL(12,2), note TEXT, KEY (id))",
    # No primary key: its rows are identified by a NOT NULL unique key (TableSchema.row_key).
    "CREATE TABLE tags (acct_id INT NOT NULL, tag VARCHAR(20) NOT NULL, counter INT NOT NULL DEFAULT 0, "
    "weight DOUBLE, UNIQUE KEY by_acct_tag (acct_id, tag))",
    # No key at all: rows identified by their whole values, duplicates included.
    "CREATE TABLE events (acct_id INT NOT NULL, kind VARCHAR(10), amount DECIMAL(10,2), KEY (acct_id))",
)
ACCTS, ORDERS, TAGGED = 3000, 2000, 600


def create_tables(conn) -> None:
    with conn.cursor() as cur:
        for ddl in SCHEMA:
            cur.execute(ddl)
        cur.execute(f"INSERT INTO acct SELECT seq, 0, CONCAT('acct ', seq), seq * 1.25, NOW(6) "
                    f"FROM seq_1_to_{ACCTS}")
        cur.execute(f"INSERT INTO orders SELECT seq, 1 + seq % {ACCTS}, 0, seq / 4, REPEAT('o', seq % 50) "
                    f"FROM seq_1_to_{ORDERS}")
        for tag in ("a", "b", "c"):
            cur.execute(f"INSERT INTO tags SELECT seq, '{tag}', 0, seq / 3 FROM seq_1_to_{TAGGED}")
        cur.execute(f"INSERT INTO events SELECT seq % {TAGGED}, IF(seq % 4, 'pay', NULL), seq % 9 FROM seq_1_to_1500")


class Writer(threading.Thread):
    """Random inserts, counter-bumping updates, deletes, primary-key updates, multi-table
    transactions, rolled-back transactions and, on request or now and then, transactions
    of thousands of rows. Every update also does ``counter = counter + 1``."""

    BIG_RATE = 0.004  # the chance of a transaction of thousands of rows per step

    def __init__(self, server, database: str, seed: int, pace: float = 0.01):
        super().__init__(name="writer", daemon=True)
        self.server, self.database = server, database
        self.rng = random.Random(seed)
        self.pace = pace
        self.stop_event = threading.Event()
        self.running = threading.Event()
        self.running.set()
        self.big_requests = 0
        self.lock = threading.Lock()
        self.error: BaseException | None = None
        self.ops: Counter = Counter()
        self.new_acct = itertools.count(5_000_000)
        self.new_order = itertools.count(10_000_000, 10_000)  # blocks of ids for bulk inserts

    # statements -------------------------------------------------------------------------
    def _acct(self) -> int:
        return self.rng.randint(1, ACCTS)

    def insert(self, cur) -> None:
        if self.rng.random() < 0.2:  # duplicates of a row that may exist already
            cur.execute("INSERT INTO events VALUES (%s, 'pay', %s), (%s, 'pay', %s)",
                        (x := self.rng.randint(1, TAGGED), y := self.rng.randint(0, 8), x, y))
        if self.rng.random() < 0.5:
            i = next(self.new_acct)
            cur.execute("INSERT INTO acct VALUES (%s, 0, %s, %s, NOW(6))", (i, f"new {i}", self.rng.randint(0, 999)))
        else:
            base, n = next(self.new_order), self.rng.randint(1, 20)
            cur.execute(f"INSERT INTO orders SELECT {base} + seq, {self._acct()}, 0, seq * 0.5, 'bulk' "
                        f"FROM seq_1_to_{n}")
        self.ops["insert"] += 1

    def update(self, cur) -> None:
        r = self.rng.random()
        if r < 0.4:
            x = self._acct()
            cur.execute("UPDATE acct SET counter = counter + 1, balance = balance + 1, seen = NOW(6) "
                        "WHERE id BETWEEN %s AND %s", (x, x + self.rng.randint(0, 10)))
        elif r < 0.7:
            x = self.rng.randint(1, ORDERS)
            cur.execute("UPDATE orders SET counter = counter + 1, amount = amount + 0.25 WHERE id BETWEEN %s AND %s "
                        "OR id BETWEEN %s AND %s", (x, x + 5, 10_000_000 + x * 7, 10_000_000 + x * 7 + 40))
        elif r < 0.85:
            x = self.rng.randint(1, TAGGED)
            cur.execute("UPDATE tags SET counter = counter + 1, weight = weight * 1.5 WHERE acct_id BETWEEN %s AND %s",
                        (x, x + 3))
        else:  # one copy of several, or all of them
            cur.execute(f"UPDATE events SET amount = amount + 1 WHERE acct_id = %s{' LIMIT 1' * (r < 0.93)}",
                        (self.rng.randint(1, TAGGED),))
        self.ops["update"] += 1

    def delete(self, cur) -> None:
        r = self.rng.random()
        if r < 0.4:
            cur.execute("DELETE FROM acct WHERE id = %s", (self._acct(),))
        elif r < 0.7:
            x = self.rng.randint(1, ORDERS)
            cur.execute("DELETE FROM orders WHERE id BETWEEN %s AND %s", (x, x + 2))
        elif r < 0.8:
            cur.execute("DELETE FROM events WHERE acct_id = %s LIMIT 1", (self.rng.randint(1, TAGGED),))
        else:
            cur.execute("DELETE FROM tags WHERE acct_id = %s AND tag = %s",
                        (self.rng.randint(1, TAGGED), self.rng.choice("abc")))
        self.ops["delete"] += 1

    def key_update(self, cur) -> None:
        r = self.rng.random()
        if r < 0.4:  # one row to a brand-new key
            cur.execute("UPDATE acct SET id = %s, counter = counter + 1 WHERE id = %s",
                        (next(self.new_acct), self._acct()))
        elif r < 0.7:  # a few rows at once; ids in [1, ACCTS] move to [1e6 + 1, 1e6 + ACCTS] once at most
            x = self._acct()
            cur.execute("UPDATE acct SET id = id + 1000000, counter = counter + 1 WHERE id BETWEEN %s AND %s",
                        (x, x + 3))
        else:  # composite unique key: every tag of one account moves (once at most)
            cur.execute("UPDATE tags SET acct_id = acct_id + 100000, counter = counter + 1 WHERE acct_id = %s",
                        (self.rng.randint(1, TAGGED),))
        self.ops["key update"] += 1

    def transaction(self, cur, rollback: bool = False) -> None:
        cur.execute("BEGIN")
        for _ in range(self.rng.randint(2, 8)):
            self.rng.choice((self.insert, self.update, self.update, self.delete, self.key_update))(cur)
        cur.execute("ROLLBACK" if rollback else "COMMIT")
        self.ops["rolled back" if rollback else "transaction"] += 1

    def big_transaction(self, cur) -> None:
        """A few thousand rows in one transaction across tables: batches of 500 rows cut inside it."""
        base = next(self.new_order)
        n = self.rng.randint(2000, 4000)
        cur.execute("BEGIN")
        cur.execute("UPDATE acct SET counter = counter + 1, balance = balance - 1 WHERE id %% 2 = %s",
                    (self.rng.randint(0, 1),))
        cur.execute(f"INSERT INTO orders SELECT {base} + seq, 1 + seq % {ACCTS}, 0, seq, 'big' FROM seq_1_to_{n}")
        cur.execute("UPDATE tags SET counter = counter + 1 WHERE tag = %s", (self.rng.choice("abc"),))
        self.key_update(cur)
        cur.execute(f"DELETE FROM orders WHERE id > {base} AND id % 3 = 0 AND id <= {base + n}")
        cur.execute(f"UPDATE orders SET counter = counter + 1 WHERE id > {base} AND id % 3 = 1 AND id <= {base + n}")
        cur.execute("COMMIT")
        self.ops["big transaction"] += 1

    def step(self, cur) -> None:
        with self.lock:
            if self.big_requests:
                self.big_requests -= 1
                big = True
            else:
                big = self.rng.random() < self.BIG_RATE
        if big:
            self.big_transaction(cur)
            return
        r = self.rng.random()
        if r < 0.22:
            self.insert(cur)
        elif r < 0.50:
            self.update(cur)
        elif r < 0.62:
            self.delete(cur)
        elif r < 0.72:
            self.key_update(cur)
        elif r < 0.97:
            self.transaction(cur)
        else:
            self.transaction(cur, rollback=True)

    # thread ---------------------------------------------------------------------------------
    def request_big(self, n: int = 1) -> None:
        with self.lock:
            self.big_requests += n

    def pause(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def run(self) -> None:
        try:
            with self.server.connect(self.database) as conn, conn.cursor() as cur:
                while not self.stop_event.is_set():
                    if not self.running.wait(0.1):
                        continue
                    self.step(cur)
                    time.sleep(self.rng.uniform(0, self.pace))
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self.error = e

    def stop(self) -> None:
        self.stop_event.set()
        self.running.set()
        self.join(60)
        assert not self.is_alive(), "writer did not stop"
        if self.error is not None:
            raise AssertionError(f"the writer failed: {self.error!r}") from self.error


# --- crash safety ------------------------------------------------------------------------------

def workload_keys(name: str, **snapshot) -> dict:
    """The ``source`` settings the workload's tables need: orders is identified by its
    configured key columns, events (no key at all) is chunked on acct_id."""
    return {"key_columns": {f"{name}.orders": ["id"]},
            "snapshot": {**snapshot, "chunk_key_columns": {f"{name}.events": "acct_id"}}}


def _shop(conn, name: str, make_config, tmp_path: Path, chunk_size: int):
    """The crash-test tables, filled; their names, config and config file."""
    create_tables(conn)
    cfg = make_config(name, chunk_size=chunk_size, stream=STREAM, source=workload_keys(name, chunk_size=chunk_size))
    return ([f"{name}.acct", f"{name}.orders", f"{name}.tags", f"{name}.events"], cfg,
            write_config_file(cfg, tmp_path / "binlake.yaml"))


def _delta_log_count(cfg: BinlakeConfig, names: list[str]) -> int:
    return sum(len(list((Path(table_uri(cfg.sink.path, n)) / "_delta_log").glob("*.json"))) for n in names)


def _checkpoint_count(cfg: BinlakeConfig) -> int:
    return len(list((Path(cfg.sink.path) / "_binlake" / "stream_checkpoint" / "_delta_log").glob("*.json")))


def kill_at_random(cfg, config, names, log_dir, rng, kills: int, password: str, *, writer: Writer | None = None,
                   writer_off: set[int] = frozenset(), big_at: set[int] = frozenset()) -> Counter:
    """Start ``binlake stream`` and SIGKILL it ``kills`` times: after a random delay (0.3-4 s,
    often short enough to land in start-up), right after a table commit appears (between a
    batch's table commits and its checkpoint), or right after a checkpoint appears (in the
    next batch). A run that exits by itself fails the test."""
    modes: Counter = Counter()
    for i in range(kills):
        if writer is not None:
            writer.pause() if i in writer_off else writer.resume()
            if i in big_at:
                writer.request_big()
        mode = rng.choices(["delay", "after table commit", "after checkpoint"], [5, 3, 2])[0]
        delay = rng.uniform(0.3, 4.0)
        tables_before, cps_before = _delta_log_count(cfg, names), _checkpoint_count(cfg)
        s = Stream(config, log_dir, password=password)
        started = time.monotonic()
        if mode == "delay":
            while time.monotonic() - started < delay and s.alive():
                time.sleep(0.01)
        else:
            if mode == "after table commit":
                def landed(n=tables_before):
                    return _delta_log_count(cfg, names) > n
            else:
                def landed(n=cps_before):
                    return _checkpoint_count(cfg) > n
            while time.monotonic() - started < 8.0 and s.alive() and not landed():
                time.sleep(0.002)
        assert s.alive(), f"kill {i} ({mode}): the stream stopped by itself: {s.describe()}"
        s.kill()
        modes[mode] += 1
        # Where the kill landed: before the run committed anything (start-up), or after; and
        # whether some table was committed past the checkpoint (a batch torn by the kill).
        if _delta_log_count(cfg, names) + _checkpoint_count(cfg) == tables_before + cps_before:
            modes["landed before any commit"] += 1
        cp = ControlStore(cfg.sink.path, cfg.pipeline.name).checkpoint()
        applied = [DeltaTable(table_uri(cfg.sink.path, n)).transaction_version(app_id(cfg.pipeline.name))
                   for n in names]
        if cp is not None and any(v is not None and v > cp.offset.applied.seq() for v in applied):
            modes["tables committed past the checkpoint"] += 1
        if cp is not None and cp.offset.resume < cp.offset.applied:
            modes["checkpoint left inside a transaction"] += 1
    return modes


def _finish(cfg, config, names, log_dir, password) -> Stream:
    final = run_stream(config, log_dir, "--until", "now", password=password)
    assert final.proc.returncode == 0, final.describe()
    assert "Traceback" not in final.stdout + final.stderr
    assert_equal(cfg, names)
    return final


def prove_after_kills(cfg, config, names, log_dir, password, modes, writer) -> None:
    """After a kill test: some stream commit landed between the kills; a last run finishes with
    Delta equal to MySQL; each table's commits strictly increase, and its committed changes
    equal the binlog's (tests/change_count.py)."""
    assert stream_commit_count(cfg, names) > 0, "no stream commit landed between the kills"
    _finish(cfg, config, names, log_dir, password)
    commits = {n: assert_commits_strictly_increase(cfg, n) for n in names}
    assert all(commits.values()), commits
    changes = assert_changes_counted(cfg, names)
    print(f"kills: {dict(modes)}; workload: {dict(writer.ops)}; stream commits: {commits}; "
          f"binlog changes, each committed once: {changes}")


def test_sigkill_at_random_moments_under_random_workload(mariadb, db, spark, make_config, tmp_path):
    name, conn = db
    names, cfg, config = _shop(conn, name, make_config, tmp_path, chunk_size=400)
    rng = random.Random(SEED)
    writer = Writer(mariadb, name, SEED + 1)
    writer.start()
    try:
        snapshot(cfg, spark)  # under the workload: the first runs also cross the hand-off
        # 14 kills; the writer is off during kills 5-7 and 12-13 (the stream works through a backlog
        # that includes a big transaction requested just before kills 4 and 11) and on for the rest;
        # big transactions are also requested before kills 1 and 9 and come at random.
        modes = kill_at_random(cfg, config, names, tmp_path / "logs", rng, 14, mariadb.password, writer=writer,
                               writer_off={5, 6, 7, 12, 13}, big_at={1, 4, 9, 11})
        assert writer.ops["big transaction"] >= 3
        writer.stop()
    finally:
        writer.stop_event.set()
        writer.running.set()
    prove_after_kills(cfg, config, names, tmp_path / "logs", mariadb.password, modes, writer)


def test_sigkill_while_catching_up_on_large_transactions(mariadb, db, spark, make_config, tmp_path):
    """A backlog of transactions of thousands of rows (batches of 500 rows cut inside each),
    killed again and again while the stream works through it."""
    name, conn = db
    names, cfg, config = _shop(conn, name, make_config, tmp_path, chunk_size=1000)
    snapshot(cfg, spark)
    writer = Writer(mariadb, name, SEED + 2)
    with mariadb.connect(name) as c, c.cursor() as cur:
        for _ in range(8):
            writer.big_transaction(cur)
            for _ in range(30):
                writer.step(cur)
    rng = random.Random(SEED + 3)
    modes = kill_at_random(cfg, config, names, tmp_path / "logs", rng, 10, mariadb.password)
    prove_after_kills(cfg, config, names, tmp_path / "logs", mariadb.password, modes, writer)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and (st := proc_stat(int(p))) and int(st[1]) == pid]


def _running(pid: int) -> bool:
    """``pid`` exists and has not ended (a zombie waiting to be reaped has)."""
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def test_sigkill_of_the_engine_process_alone_frees_the_server_id(mariadb, db, make_config, tmp_path):
    """``kill -9 <pid>`` (or the OOM killer) ends the engine process but not, by itself,
    its reader process: the restart must still be able to stream with its server_id."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, counter INT NOT NULL DEFAULT 0)")
    cfg = make_config(name, stream=STREAM, source={"startup": {"mode": "latest"}})
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    s = Stream(config, tmp_path / "logs", password=mariadb.password)
    try:
        wait_for(lambda: replica_registered(mariadb, cfg.source.server_id) or not s.alive(), 30, "the stream")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, 0)", [(i,) for i in range(100)])
        wait_for(lambda: tables_equal(cfg, [f"{name}.t"]) or not s.alive(), 30, "the first rows in Delta")
        assert s.alive(), s.describe()
        readers = _children(s.proc.pid)
        assert readers, "no reader process under the engine"
        os.kill(s.proc.pid, signal.SIGKILL)  # the engine process only
        s.proc.wait()
        # The kernel ends the reader with its engine (PR_SET_PDEATHSIG), before any restart.
        wait_for(lambda: not any(_running(p) for p in readers), 10, "the reader process to end with its engine")
        with conn.cursor() as cur:
            cur.execute("UPDATE t SET counter = counter + 1 WHERE id < 50")
        final = run_stream(config, tmp_path / "logs", "--until", "now", password=mariadb.password, timeout=120)
        assert final.proc.returncode == 0, final.describe()
        assert_equal(cfg, [f"{name}.t"])
    finally:
        s.kill()  # whatever is left of its process group


# --- source server restart -------------------------------------------------------------------

def own_config(tmp_path: Path, server: LocalMariaDB, database: str, server_id: int, **sections) -> BinlakeConfig:
    os.environ[PASSWORD_VAR] = server.password
    raw = {
        "pipeline": {"name": f"own_{database}", "parallelism": 1},
        "source": {"host": server.host, "port": server.port, "user": "root", "password": server.password,
                   "server_id": server_id, "tables": [rf"{database}\..*"], "startup": {"mode": "latest"}},
        "sink": {"path": str(tmp_path / "lake")},
        "stream": dict(STREAM),
    }
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    raw["stream"] = batches_as_set(raw["stream"])
    return parse_config(raw)


@pytest.fixture
def own_server(tmp_path):
    """A MariaDB server of this test alone (server_id 1), on a data directory that
    survives its restarts."""
    server = LocalMariaDB(server_id=1, base_dir=tmp_path / "mariadb").start()
    yield server
    server.cleanup()


def _setup_own(server: LocalMariaDB) -> None:
    with server.connect() as c, c.cursor() as cur:
        cur.execute("CREATE DATABASE shop DEFAULT CHARSET utf8mb4")
        cur.execute("CREATE TABLE shop.t (id INT PRIMARY KEY, counter INT NOT NULL DEFAULT 0, v VARCHAR(40))")


def _rows(server: LocalMariaDB, ids, label: str) -> None:
    with server.connect("shop") as c, c.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, 0, %s)", [(i, f"{label} {i}") for i in ids])
        cur.execute("UPDATE t SET counter = counter + 1, v = CONCAT(v, '+') WHERE id % 3 = 0")
        cur.execute("DELETE FROM t WHERE id % 7 = 0")
        cur.execute("UPDATE t SET id = id + 1000000, counter = counter + 1 WHERE id % 11 = 0 AND id < 1000000")


def test_source_server_restart_mid_stream(own_server, tmp_path):
    server = own_server
    _setup_own(server)
    with server.connect() as c, c.cursor() as cur:
        start = master_position(cur)  # the stream starts at the binlog end: here, no change between
    cfg = own_config(tmp_path, server, "shop", 4242)
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    names = ["shop.t"]
    logs = tmp_path / "logs"
    s = Stream(config, logs, password=server.password)
    try:
        wait_for(lambda: replica_registered(server, 4242) or not s.alive(), 30, "the stream to connect")
        assert s.alive(), s.describe()
        _rows(server, range(1, 2001), "before")
        wait_for(lambda: tables_equal(cfg, names), 60, "the rows written before the restart")

        # 1. A clean shutdown and start between transactions.
        server.stop()
        time.sleep(1.0)
        server.start()
        assert s.alive(), s.describe()
        _rows(server, range(2001, 4001), "after restart")
        wait_for(lambda: tables_equal(cfg, names), 90, "the rows written after the restart (reconnect)")

        # 2. A crash of the server (SIGKILL) while the stream is inside a transaction of 80000+
        # rows: it commits what it read, reconnects at the transaction's start and skips what it
        # already applied.
        def delta_count() -> int:
            return DeltaTable(table_uri(cfg.sink.path, "shop.t")).to_pyarrow_dataset().count_rows()

        before = delta_count()
        with server.connect("shop") as c, c.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("INSERT INTO t SELECT 100000 + seq, 0, 'big' FROM seq_1_to_80000")
            cur.execute("UPDATE t SET counter = counter + 1 WHERE id < 100000 OR id % 1000 = 0")
            cur.execute("COMMIT")
        wait_for(lambda: delta_count() > before, 60, "the stream to start on the large transaction", interval=0.005)
        server._proc.kill()
        server._proc.wait()
        server._proc = None
        time.sleep(1.0)
        print(f"{delta_count() - before} of the large transaction's 80000 new rows were committed when the "
              "server was killed")
        server.start()
        _rows(server, range(4001, 6001), "after crash")
        wait_for(lambda: tables_equal(cfg, names), 90, "the rows written after the server crash")
        assert s.alive(), s.describe()
        assert s.terminate() == 0, s.describe()
    finally:
        s.kill()
    m = re.search(r"(\d+) reconnects", s.stdout)
    assert m and int(m.group(1)) >= 2, f"expected at least two reconnects: {s.describe()}"
    assert "stopped: stopped by SIGTERM" in s.stdout
    _rows(server, range(6001, 6501), "while stopped")
    final = run_stream(config, logs, "--until", "now", password=server.password)
    assert final.proc.returncode == 0, final.describe()
    assert_equal(cfg, names)
    assert assert_commits_strictly_increase(cfg, "shop.t") > 0
    assert_changes_counted(cfg, names, start=start)  # the crash inside the large transaction lost and repeated none


# --- binlog rotation ---------------------------------------------------------------------------

def test_binlog_rotation_while_streaming(mariadb, db, spark, make_config, tmp_path):
    name, conn = db
    names, cfg, config = _shop(conn, name, make_config, tmp_path, chunk_size=1000)
    snapshot(cfg, spark)
    logs = tmp_path / "logs"
    writer = Writer(mariadb, name, SEED + 4)
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        first_file = BinlogPosition(*cur.fetchone()[:2])
    s = Stream(config, logs, password=mariadb.password)
    try:
        with mariadb.connect(name) as c, c.cursor() as cur:
            for round_ in range(6):
                for _ in range(40):
                    writer.step(cur)
                if round_ in (1, 4):
                    writer.big_transaction(cur)  # rotation right after a transaction of thousands of rows
                cur.execute("FLUSH BINARY LOGS")
                if round_ == 2:  # a crash and restart across rotations
                    time.sleep(1.5)
                    assert s.alive(), s.describe()
                    s.kill()
                    s = Stream(config, logs, password=mariadb.password)
                time.sleep(0.5)
            cur.execute("FLUSH BINARY LOGS")
            for _ in range(20):
                writer.step(cur)
        wait_for(lambda: tables_equal(cfg, names) or not s.alive(), 90, "the stream to catch up")
        assert s.alive(), s.describe()
        assert s.terminate() == 0, s.describe()
    finally:
        s.kill()
    final = run_stream(config, logs, "--until", "now", password=mariadb.password)
    assert final.proc.returncode == 0, final.describe()
    assert_equal(cfg, names)
    cp = ControlStore(cfg.sink.path, cfg.pipeline.name).checkpoint()
    assert cp.offset.applied.file_number >= first_file.file_number + 7, (first_file, cp.offset)
    for n in names:
        assert assert_commits_strictly_increase(cfg, n) > 0
    assert_changes_counted(cfg, names)  # a range across the rotated files and a kill


# --- purged position --------------------------------------------------------------------------

def test_purged_position_then_resync(own_server, tmp_path):
    server = own_server
    _setup_own(server)
    cfg = own_config(tmp_path, server, "shop", 4343)
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    logs = tmp_path / "logs"
    first = run_stream(config, logs, "--until", "now", password=server.password)  # checkpoint at the binlog end
    assert first.proc.returncode == 0, first.describe()
    _rows(server, range(1, 501), "first")
    second = run_stream(config, logs, "--until", "now", password=server.password)
    assert second.proc.returncode == 0, second.describe()
    assert_equal(cfg, ["shop.t"])
    applied = ControlStore(cfg.sink.path, cfg.pipeline.name).checkpoint().offset
    early = run_stream(config, logs, password=server.password, command="resync")
    assert early.proc.returncode == 2 and "nothing to resync" in early.stderr, early.describe()

    _rows(server, range(501, 1001), "second")  # never streamed: lost with the purge
    with server.connect() as c, c.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")

        def purged() -> bool:
            # MariaDB keeps a binlog until its binlog checkpoint (InnoDB crash recovery) has moved
            # on, so PURGE may keep the file for a moment after FLUSH.
            cur.execute("SHOW MASTER STATUS")
            cur.execute(f"PURGE BINARY LOGS TO '{cur.fetchone()[0]}'")
            cur.execute("SHOW BINARY LOGS")
            return applied.resume.file not in [r[0] for r in cur.fetchall()]

        wait_for(purged, 30, f"the server to purge {applied.resume.file}", interval=0.2)
    version = DeltaTable(table_uri(cfg.sink.path, "shop.t")).version()

    for args in (("--until", "now"), ()):
        r = run_stream(config, logs, *args, password=server.password, timeout=60)
        assert r.proc.returncode == 2, r.describe()
        (line,) = _lines(r.stderr)
        assert "purged" in line or "no longer has" in line, line
        assert "binlake resync" in line and "re-snapshot" in line, line
        assert applied.resume.file in line, line
        assert "Traceback" not in r.stdout + r.stderr
    assert DeltaTable(table_uri(cfg.sink.path, "shop.t")).version() == version  # nothing written

    # The way out: resync restarts at the binlog end and backfills the table online, keeping it.
    _rows(server, range(1001, 1201), "third")
    r = run_stream(config, logs, password=server.password, command="resync")
    assert r.proc.returncode == 0, r.describe()
    assert "done" in r.stdout, r.describe()
    assert_equal(cfg, ["shop.t"])  # the rows only the purged binlog had are in Delta
    table = DeltaTable(table_uri(cfg.sink.path, "shop.t"))
    assert table.version() > version and len(table.history()) > version  # the same table, history kept
    _rows(server, range(1201, 1401), "fourth")
    r = run_stream(config, logs, "--until", "now", password=server.password)
    assert r.proc.returncode == 0, r.describe()
    assert_equal(cfg, ["shop.t"])


# --- server_id in use -------------------------------------------------------------------------

def test_server_id_in_use_by_a_running_stream(mariadb, db, make_config, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, counter INT NOT NULL DEFAULT 0)")
    server_id = 6100 + random.Random(SEED).randint(0, 99)
    a = make_config(name, server_id=server_id, stream=STREAM, source={"startup": {"mode": "latest"}},
                    sink={"path": str(tmp_path / "lake_a")})
    b = make_config(name, server_id=server_id, stream=STREAM, source={"startup": {"mode": "latest"}},
                    sink={"path": str(tmp_path / "lake_b")}, pipeline={"name": f"other_{name}"})
    config_a = write_config_file(a, tmp_path / "a.yaml")
    config_b = write_config_file(b, tmp_path / "b.yaml")
    logs = tmp_path / "logs"
    first = Stream(config_a, logs, password=mariadb.password)
    try:
        wait_for(lambda: replica_registered(mariadb, server_id) or not first.alive(), 30, "the first stream")
        assert first.alive(), first.describe()
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, 0)", [(i,) for i in range(50)])
        for args in ((), ("--until", "now")):
            second = run_stream(config_b, logs, *args, password=mariadb.password, timeout=60)
            assert second.proc.returncode == 2, second.describe()
            # Refused before reading: one line, no reconnect attempt (retrying could only take the
            # running stream's connection), and the running stream still holds the server_id.
            (line,) = _lines(second.stderr)
            assert "server_id" in line and str(server_id) in line and "in use" in line, line
            assert "Traceback" not in second.stdout + second.stderr
            assert "reconnecting" not in second.stdout + second.stderr, second.describe()
            assert first.alive() and replica_registered(mariadb, server_id), first.describe()
        assert not Path(tmp_path / "lake_b" / "_binlake" / "stream_checkpoint").exists()
        # The running stream was not disturbed: it still applies changes.
        with conn.cursor() as cur:
            cur.execute("UPDATE t SET counter = counter + 1 WHERE id < 25")
            cur.execute("DELETE FROM t WHERE id >= 40")
        wait_for(lambda: tables_equal(a, [f"{name}.t"]) or not first.alive(), 30, "the first stream to apply")
        assert first.alive(), first.describe()
        assert first.terminate() == 0, first.describe()
        assert "0 reconnects" in first.stdout, first.describe()
    finally:
        first.kill()
    assert_equal(a, [f"{name}.t"])


def test_server_id_equal_to_the_sources_own(mariadb, db, make_config, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cur.execute("SELECT @@server_id")
        own = int(cur.fetchone()[0])
    cfg = make_config(name, server_id=own, source={"startup": {"mode": "latest"}})
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    r = run_stream(config, tmp_path / "logs", "--until", "now", password=mariadb.password, timeout=60)
    assert r.proc.returncode == 2, r.describe()
    (line,) = _lines(r.stderr)
    assert "server_id" in line and "source server's own" in line, line
    assert "Traceback" not in r.stdout + r.stderr
