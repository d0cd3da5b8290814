"""Soak: SIGKILL at KILLS (50+) points under a random writer — inserts, counter-bumping
updates, deletes, key updates, multi-table and rolled-back transactions, transactions of
thousands of rows and DDL (columns added to and dropped from ``tags`` while it is written,
``acct.name`` widened) — each kill followed by a restart that must leave Delta equal to MySQL.

Kills land at *targeted* points, reached by running the CLI through tests/pause_points.py
(``<point>:<n>``: the process says it reached the n-th hit of the point and waits there to be
killed; the product has no test hook):

- ``snapshot_chunk_committed``: ``binlake snapshot`` (under the writer) with a chunk group's
  rows and records committed, their mirror in ``_binlake/`` not written;
- ``batch_read``: a micro-batch read, none of its tables committed;
- ``tables_committed``: a batch's tables committed, the checkpoint not written;
- ``schema_applied``: a DDL (a column added to ``tags``, just before) applied to Delta, its
  history record and the checkpoint past it not written;
- ``backfill_merged``: a backfill merge commit (of a table damaged by hand in Delta and requested
  just before) made, the request's progress not saved;

and at random instants (tests/test_stream_crash.py's ``kill_at_random``: a random delay, right
after a table commit, right after a checkpoint). The test asserts every kind landed.

After every kill the writer is quiesced and the stream restarts until the binlog end (the
engine in this process; the last restart as ``binlake stream --until now``): Delta must equal
MySQL row by row (every update also bumps ``counter``: a change lost or applied on stale
values shows), and each table's stream commits must carry strictly increasing offsets and
transaction versions (no change applied twice). The same at the end, and then the count: the
changes every stream commit of every run records, summed per table and op, equal the binlog's
changes from the stream's start to its end (tests/change_count.py: a batch applied twice or
lost shows, although the rows end equal).

Bounded: small tables, batches of 500 rows or 0.25 s, a fixed number of kills (measured: 6 to
9 minutes on 2 cores shared with other test runs, load average 6-15; the phases' seconds are
printed). BINLAKE_SOAK_SEED replays another schedule and workload; BINLAKE_SOAK_KILLS changes
the number of stream kills.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from pipelines.backfill.requests import request_backfill
from pipelines.lake.tables import table_uri
from pipelines.stream import StreamEngine
from tests.change_count import assert_changes_counted
from tests.helpers import assert_equal, snapshot, write_config_file
from tests.pause_points import MARKER
from tests.test_stream_crash import (
    STREAM,
    Stream,
    Writer,
    _finish,
    assert_commits_strictly_increase,
    create_tables,
    kill_at_random,
    workload_keys,
)

SEED_VAR = "BINLAKE_SOAK_SEED"  # a failure shows the seed (tests/conftest.py)
SEED = int(os.environ.get(SEED_VAR, "20261125"))
STREAM_KILLS = int(os.environ.get("BINLAKE_SOAK_KILLS", "50"))
SNAPSHOT_KILLS = 1  # each starts Spark: seconds
SOAK_STREAM = {**STREAM, "max_batch_seconds": 0.25}
TARGETED = ("batch_read", "tables_committed", "schema_applied", "backfill_merged")
PAUSE_TIMEOUT = {"stream": 30.0, "snapshot": 120.0}  # seconds for a run to reach its pause point


class SoakWriter(Writer):
    """The crash tests' writer plus DDL now and then (and on request): a column added to
    ``tags`` (its DEFAULT fills the existing rows), one of those dropped, ``acct.name`` widened.
    The writer's statements name the columns of ``tags`` and never insert into it, and leave
    ``acct``'s columns as they are. ``quiesce()`` returns once no statement is in flight."""

    DDL_RATE = 0.004  # per step
    BIG_RATE = 0.001  # a few transactions of thousands of rows: the tables stay small

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.quiet = threading.Lock()  # held by a step
        self.ddl_lock = threading.Lock()  # the test thread's DDL and the writer's, one at a time
        self.extra: list[str] = []  # columns added to tags and not dropped
        self.column = itertools.count(1)
        self.width = itertools.count(41)

    def step(self, cur) -> None:
        with self.quiet:
            if not self.running.is_set():
                return
            if self.rng.random() < self.DDL_RATE:
                self.ddl(cur)
            else:
                super().step(cur)

    def quiesce(self) -> None:
        self.pause()
        with self.quiet:
            pass

    def add_column(self, cur) -> None:
        with self.ddl_lock:
            name = f"x{next(self.column)}"
            cur.execute(f"ALTER TABLE tags ADD COLUMN {name} INT NOT NULL DEFAULT {self.rng.randint(0, 99)}")
            self.extra.append(name)
            self.ops["ddl add column"] += 1

    def ddl(self, cur) -> None:
        r = self.rng.random()
        if r < 0.5 or not self.extra:
            self.add_column(cur)
        elif r < 0.8:
            with self.ddl_lock:
                cur.execute(f"ALTER TABLE tags DROP COLUMN {self.extra.pop(self.rng.randrange(len(self.extra)))}")
                self.ops["ddl drop column"] += 1
        else:
            cur.execute(f"ALTER TABLE acct MODIFY name VARCHAR({next(self.width)})")
            self.ops["ddl widen"] += 1


def _marker(s: Stream) -> bool:
    return MARKER in s.stderr


def kill_paused(config, logs, point: str, n: int, password: str, command: str = "stream") -> bool:
    """Run ``binlake <command>`` paused at the n-th hit of ``point``; SIGKILL it there. True when
    it reached the point (False: killed after PAUSE_TIMEOUT s without reaching it)."""
    s = Stream(config, logs, password=password, command=command, pause=f"{point}:{n}")
    try:
        started = time.monotonic()
        while time.monotonic() - started < PAUSE_TIMEOUT[command] and s.alive() and not _marker(s):
            time.sleep(0.01)
        assert s.alive(), f"{point}:{n}: the run stopped by itself: {s.describe()}"
        return _marker(s)
    finally:
        s.kill()


def _damage(cfg, name: str, key: str, rng: random.Random) -> None:
    """Rows deleted from the Delta table by hand: the backfill's merges have something to write."""
    DeltaTable(table_uri(cfg.sink.path, name)).delete(f"{key} % 7 = {rng.randint(0, 6)}")


def _check(cfg, names, timings: Counter, seen: dict[str, int]) -> None:
    """Restart to the binlog end (in this process: a CLI start-up per kill would double the
    soak's time), then Delta equals MySQL and the stream commits strictly increase (those
    since the version ``seen`` last, and the one before them)."""
    t0 = time.monotonic()
    summary = StreamEngine(cfg, until_now=True).run()
    assert summary.stop_reason.startswith("reached"), summary.stop_reason
    assert_equal(cfg, names)
    t1 = time.monotonic()
    for n in names:
        assert_commits_strictly_increase(cfg, n, since=seen.get(n, 0))
        seen[n] = max(int(f.stem) for f in (Path(table_uri(cfg.sink.path, n)) / "_delta_log").glob("*.json"))
    timings["restarts and Delta = MySQL"] += t1 - t0
    timings["commit checks"] += time.monotonic() - t1


@pytest.mark.soak
@pytest.mark.timeout(1800)  # 6 to 9 minutes measured on loaded cores: twice the default
def test_soak_sigkill_at_targeted_points(mariadb, db, spark, make_config, tmp_path):
    began = time.monotonic()
    name, conn = db
    create_tables(conn)
    names = [f"{name}.{t}" for t in ("acct", "orders", "tags", "events")]
    cfg = make_config(name, chunk_size=400, stream=SOAK_STREAM, source=workload_keys(name, chunk_size=400))
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    logs, password = tmp_path / "logs", mariadb.password
    rng = random.Random(SEED)
    landed, missed, random_modes = Counter(), Counter(), Counter()
    timings: Counter = Counter()
    seen: dict[str, int] = {}  # Delta version of each table at the last check
    writer = SoakWriter(mariadb, name, SEED + 1, pace=0.1)
    writer.start()
    try:
        # The snapshot, under the writer, killed inside chunk commits; then run to its end.
        for _ in range(SNAPSHOT_KILLS):
            reached = kill_paused(config, logs, "snapshot_chunk_committed", rng.randint(1, 4), password, "snapshot")
            (landed if reached else missed)["snapshot_chunk_committed"] += 1
        snapshot(cfg, spark)  # the rest, on the test session's Spark (no JVM start-up when other tests ran)
        timings["snapshot"] = time.monotonic() - began

        # Stream kills: targeted and random, in a shuffled schedule.
        kinds = [TARGETED[i % len(TARGETED)] if i % 5 else "random" for i in range(STREAM_KILLS)]
        rng.shuffle(kinds)
        with mariadb.connect(name) as c, c.cursor() as cur:
            for i, kind in enumerate(kinds):
                t0 = time.monotonic()
                writer.resume()
                if kind == "random":
                    random_modes += kill_at_random(cfg, config, names, logs, rng, 1, password, writer=writer)
                    landed[kind] += 1
                else:
                    if kind == "schema_applied":
                        writer.add_column(cur)  # in the binlog before the run starts
                    elif kind == "backfill_merged":
                        writer.quiesce()
                        table, key = rng.choice([(names[0], "id"), (names[2], "acct_id")])
                        _damage(cfg, table, key, rng)
                        request_backfill(cfg, table)
                        writer.resume()
                    n = 1 if kind in ("schema_applied", "backfill_merged") else rng.randint(1, 3)
                    (landed if kill_paused(config, logs, kind, n, password) else missed)[kind] += 1
                writer.quiesce()
                timings["kill runs"] += time.monotonic() - t0
                _check(cfg, names, timings, seen)
                if i % 10 == 9:
                    print(f"{i + 1} stream kills, {time.monotonic() - began:.0f} s: {dict(landed)}", flush=True)
        writer.stop()
    finally:
        writer.stop_event.set()
        writer.running.set()

    t0 = time.monotonic()
    _finish(cfg, config, names, logs, password)  # the last restart as a user runs it: Delta = MySQL
    commits = {n: assert_commits_strictly_increase(cfg, n) for n in names}  # every commit
    timings["restarts and Delta = MySQL"] += time.monotonic() - t0
    t0 = time.monotonic()
    changes = assert_changes_counted(cfg, names)  # over every run: no change applied twice, none lost
    timings["change count"] = time.monotonic() - t0
    timings["total"] = time.monotonic() - began
    print(f"kills landed: {dict(landed)}; missed: {dict(missed)}; random kills: {dict(random_modes)}; "
          f"workload: {dict(writer.ops)}; stream commits: {commits}; binlog changes, each committed once: {changes}; "
          f"seconds: { {k: round(v) for k, v in timings.items()} }")
    assert all(commits.values()), commits
    for kind in ("snapshot_chunk_committed", *TARGETED, "random"):
        assert landed[kind] > 0, f"no kill landed at {kind}: landed {dict(landed)}, missed {dict(missed)}"
    assert sum(landed.values()) + sum(missed.values()) >= 50
    assert sum(missed.values()) <= len(kinds) // 10, f"too many runs never reached their point: {dict(missed)}"
    assert writer.ops["ddl add column"] > 0 and writer.ops["key update"] > 0 and writer.ops["transaction"] > 0
