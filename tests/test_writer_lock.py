"""One writer per pipeline (pipelines/lake/writer_lock.py): a second writing process is refused at
once, naming the holder, with exit 2; a SIGKILLed holder's file lock is free at once; a lease
expires unless renewed, and only one of several racing processes gets it; read-only commands
(``status``, ``validate``) never take the lock and are never refused."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipelines.lake.writer_lock import (
    LOCK_ENV,
    FileLock,
    LeaseLock,
    LeaseLost,
    WriterLockHeld,
    lock_name,
    writer_lock,
)
from tests.test_cli import BINLAKE, PASSWORD_VAR, run_cli, write_config


class FakeClock:
    """A settable UTC clock for lease expiry without waiting."""

    def __init__(self):
        self.now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


# --- the lock objects, in one process --------------------------------------------------------


def test_file_lock_refuses_a_second_holder_and_names_the_first(tmp_path):
    first = FileLock(str(tmp_path), "shop", "binlake stream -c a.yaml")
    first.acquire()
    second = FileLock(str(tmp_path), "shop", "binlake snapshot -c a.yaml")
    with pytest.raises(WriterLockHeld) as e:
        second.acquire()
    held = e.value.holder
    assert (held.host, held.pid, held.command) == (socket.gethostname(), os.getpid(), "binlake stream -c a.yaml")
    msg = str(e.value)
    assert f"pid {os.getpid()}" in msg and socket.gethostname() in msg and "binlake stream" in msg and "since" in msg
    assert second.holder() == held  # looking never takes it
    # Another pipeline on the same lake has its own lock.
    FileLock(str(tmp_path), "crm", "binlake stream").acquire()
    first.release()
    assert second.holder() is None  # released: no stale record
    second.acquire()
    second.release()


_HOLDER_WITH_CHILD = """
import os, sys, time
from pipelines.lake.writer_lock import FileLock
FileLock(sys.argv[1], "shop", "holder").acquire()
child = os.fork()
if child == 0:  # a forked child (like the stream's binlog reader) that outlives its parent
    # Printed by the child, so the test kills the parent only once the child's after-fork hooks
    # have run: killing it sooner would test a child that had not started yet.
    print(os.getpid(), flush=True)
    time.sleep(120)
    os._exit(0)
time.sleep(120)
"""


def test_a_forked_child_does_not_keep_a_killed_holders_lock(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER_WITH_CHILD, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, cwd=Path(__file__).parent.parent)
    child = int(holder.stdout.readline())
    try:
        with pytest.raises(WriterLockHeld):
            FileLock(str(tmp_path), "shop", "second").acquire()
        holder.kill()
        holder.wait()
        os.kill(child, 0)  # the child still lives...
        FileLock(str(tmp_path), "shop", "second").acquire()  # ...and the lock is free all the same
    finally:
        os.kill(child, signal.SIGKILL)


def test_lock_names_are_plain_and_distinct():
    assert lock_name("shop_to_lake") == "shop_to_lake"
    odd = ["a/b", "a b", "..", "ü", "a\\b"]
    names = [lock_name(n) for n in odd]
    assert all("/" not in n and "\\" not in n and n not in (".", "..") for n in names)
    assert len(set(names)) == len(odd)


def test_lease_expires_unless_renewed(tmp_path):
    clock = FakeClock()
    a = LeaseLock(str(tmp_path), "shop", "binlake stream", ttl=60, clock=clock, renew_in_background=False)
    b = LeaseLock(str(tmp_path), "shop", "binlake snapshot", ttl=60, clock=clock, renew_in_background=False)
    a.acquire()
    clock.advance(40)
    a.renew()  # now valid until t+100
    clock.advance(30)  # t+70: past the first expiry, within the renewed one
    with pytest.raises(WriterLockHeld) as e:
        b.acquire()
    assert e.value.holder.pid == os.getpid() and "lease valid until" in str(e.value)
    clock.advance(31)  # t+101: expired
    assert b.holder() is None
    b.acquire()
    with pytest.raises(LeaseLost, match="taken over"):
        a.renew()  # the old holder learns it lost the lease
    b.release()
    assert a.holder() is None
    a.acquire()  # released: free at once
    a.release()


def test_background_renewal_keeps_the_lease_and_detects_a_takeover(tmp_path):
    lost = threading.Event()
    messages = []

    def on_lost(message: str) -> None:
        messages.append(message)
        lost.set()

    a = LeaseLock(str(tmp_path), "shop", "binlake stream", ttl=0.9, on_lost=on_lost)
    first = a.acquire()
    time.sleep(2.0)  # over two ttl: renewed in the background meanwhile
    assert not lost.is_set()
    with pytest.raises(WriterLockHeld):
        LeaseLock(str(tmp_path), "shop", "binlake snapshot", ttl=0.9, renew_in_background=False).acquire()
    assert a.holder().expires > first.expires
    # Split brain: a host whose clock runs an hour ahead sees the lease as expired and takes it.
    # The holder's next renewal sees that and gives up instead of writing on.
    ahead = LeaseLock(str(tmp_path), "shop", "rogue", ttl=0.9, renew_in_background=False,
                      clock=lambda: dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    ahead.acquire()
    assert lost.wait(5), "the holder never noticed the takeover"
    assert "taken over" in messages[0] and "rogue" in messages[0]
    a.release()  # not ours any more: leaves the rogue's lease alone
    assert a.holder().command == "rogue"


def test_a_take_that_loses_the_commit_to_a_write_leaving_the_lease_over_takes_it_at_the_next_version(tmp_path):
    """A host whose clock runs ahead reads the lease as over; between its read and its commit the
    holder renews it (a lease still over by that host's clock). The take is tried again on the new
    version and succeeds, and the holder's next renewal finds the lease taken."""
    a = LeaseLock(str(tmp_path), "shop", "binlake stream", ttl=60, renew_in_background=False)
    a.acquire()
    ahead = LeaseLock(str(tmp_path), "shop", "rogue", ttl=60, renew_in_background=False,
                      clock=lambda: dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    commits = []
    real_commit = ahead._commit

    def renewed_first(table, holder, released=False):
        if not commits:
            a.renew()  # takes the version the rogue read the lease at plus one
        commits.append(table.version())
        real_commit(table, holder, released)

    ahead._commit = renewed_first
    taken = ahead.acquire()
    assert commits == [commits[0], commits[0] + 1]  # lost once, then committed at the next version
    assert a.holder().token == taken.token
    with pytest.raises(LeaseLost, match="taken over"):
        a.renew()


_RACER = """
import json, os, sys, time
from pipelines.lake.writer_lock import LeaseLock, WriterLockHeld
sink, go, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
lock = LeaseLock(sink, "shop", f"racer {os.getpid()}", ttl=60, storage_options=options, renew_in_background=False)
print("ready", flush=True)
while not os.path.exists(go):  # start together
    time.sleep(0.001)
try:
    lock.acquire()
    print("won", flush=True)
except WriterLockHeld:
    print("refused", flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(go + ".done") and time.monotonic() < deadline:
    time.sleep(0.01)  # a winner stays alive: a dead process's lease is free (same host)
"""


def race_for_lease(sink: str, go: Path, storage_options: dict | None = None, racers: int = 4,
                   expired_first: bool = False) -> list[str]:
    """Start ``racers`` processes that take the lease of ``sink`` at the same instant (optionally
    over a lease that has run out); returns their outcomes, sorted."""
    if expired_first:  # a lease table whose lease has run out (versions > 0: the overwrite path)
        clock = FakeClock()
        clock.now = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
        LeaseLock(sink, "shop", "old", ttl=1, clock=clock, storage_options=storage_options,
                  renew_in_background=False).acquire()
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, sink, str(go), json.dumps(storage_options or {})],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              cwd=Path(__file__).parent.parent) for _ in range(racers)]
    ready = [p.stdout.readline().strip() for p in procs]  # each imported, at the line ('' if it died)
    assert ready == ["ready"] * racers, ready
    go.touch()
    outcomes = sorted(p.stdout.readline().strip() for p in procs)
    Path(f"{go}.done").touch()
    for p in procs:
        p.communicate(timeout=120)
    return outcomes


@pytest.mark.parametrize("expired_first", [False, True], ids=["new table", "expired lease"])
def test_only_one_of_racing_processes_gets_the_lease(tmp_path, expired_first):
    outcomes = race_for_lease(str(tmp_path / "lake"), tmp_path / "go", expired_first=expired_first)
    assert outcomes == ["refused", "refused", "refused", "won"]


def test_a_lease_left_by_a_dead_process_of_this_host_is_free_at_once(tmp_path):
    """A holder killed before it could release (here: exiting without release) leaves a lease that
    has not expired; on the same host its pid is gone, so the next writer need not wait the ttl."""
    sink = str(tmp_path / "lake")
    taker = ("import os, sys; from pipelines.lake.writer_lock import LeaseLock; "
             "LeaseLock(sys.argv[1], 'shop', 'killed', ttl=600, renew_in_background=False).acquire(); os._exit(0)")
    subprocess.run([sys.executable, "-c", taker, sink], check=True, cwd=Path(__file__).parent.parent)
    table = LeaseLock(sink, "shop", "look", ttl=600)._table()
    left = LeaseLock._current(table)
    assert left is not None and left.command == "killed" and left.expires > dt.datetime.now(dt.UTC)
    lock = LeaseLock(sink, "shop", "next", ttl=600, renew_in_background=False)
    assert lock.holder() is None
    assert lock.acquire().command == "next"
    lock.release()


def test_forced_kinds(tmp_path, monkeypatch):
    assert isinstance(writer_lock(str(tmp_path), "p", "c"), FileLock)
    assert isinstance(writer_lock("s3://bucket/lake", "p", "c"), LeaseLock)
    monkeypatch.setenv(LOCK_ENV, "lease")
    assert isinstance(writer_lock(str(tmp_path), "p", "c"), LeaseLock)


# --- the CLI: real processes -------------------------------------------------------------------


@pytest.fixture
def stream_config(mariadb, db, tmp_path):
    """A config streaming a small table from the binlog end (no snapshot needed)."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, label VARCHAR(30))")
        cur.executemany("INSERT INTO items VALUES (%s, %s)", [(i, f"item {i}") for i in range(1, 51)])
    return write_config(tmp_path, mariadb, name, startup={"mode": "latest"}, server_id=7300 + os.getpid() % 500)


def _start_holder(config: str, password: str, extra_env: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, PASSWORD_VAR: password, **(extra_env or {})}
    return subprocess.Popen([BINLAKE, "stream", "-c", config, "--max-seconds", "300"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for_holder(lock, pid: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        h = lock.holder()
        if h is not None and h.pid == pid:
            return
        time.sleep(0.1)
    raise AssertionError("the first process never took the writer lock")


def _lock_of(config: str, mode: str = "file"):
    import yaml

    raw = yaml.safe_load(Path(config).read_text())
    cls = FileLock if mode == "file" else LeaseLock
    return cls(raw["sink"]["path"], raw["pipeline"]["name"], "test")


def test_second_writer_refused_status_not_and_restart_after_sigkill(mariadb, stream_config):
    holder = _start_holder(stream_config, mariadb.password)
    try:
        _wait_for_holder(_lock_of(stream_config), holder.pid)
        for command in (["snapshot"], ["stream", "--until", "now"], ["run"]):
            r = run_cli(command[0], "-c", stream_config, *command[1:], password=mariadb.password, timeout=120)
            assert r.returncode == 2, (command, r.stderr)
            (line,) = [x for x in r.stderr.splitlines() if x.strip()]
            assert f"pid {holder.pid}" in line and socket.gethostname() in line
            assert "binlake stream" in line and "since" in line and "already being written" in line
            assert "Traceback" not in r.stderr
        # Read-only commands are never refused and see the writer.
        r = run_cli("status", "-c", stream_config, password=mariadb.password)
        assert r.returncode == 0, r.stderr
        assert f"pid {holder.pid}" in r.stdout
        r = run_cli("status", "-c", stream_config, "--json", password=mariadb.password)
        assert r.returncode == 0 and json.loads(r.stdout)["writer"]["pid"] == holder.pid
        assert run_cli("validate", "-c", stream_config, password=mariadb.password).returncode == 0
        assert holder.poll() is None  # the holder was not disturbed
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # the CLI and its binlog reader child, as a crash would
        holder.wait()
    # Right after the SIGKILL, the next writer proceeds: the kernel dropped the lock with the process.
    r = run_cli("stream", "-c", stream_config, "--until", "now", password=mariadb.password, timeout=120)
    assert r.returncode == 0, r.stderr
    r = run_cli("status", "-c", stream_config, "--json", password=mariadb.password)
    assert json.loads(r.stdout)["writer"] is None


def test_restart_after_sigkill_of_the_holder_alone(mariadb, stream_config):
    """Only the CLI process is killed: its forked binlog reader must not keep the lock alive."""
    holder = _start_holder(stream_config, mariadb.password)
    _wait_for_holder(_lock_of(stream_config), holder.pid)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    r = run_cli("stream", "-c", stream_config, "--until", "now", password=mariadb.password, timeout=120)
    assert r.returncode == 0, r.stderr


def test_lease_mode_cli_refuses_then_frees_after_expiry(mariadb, stream_config, monkeypatch):
    env = {LOCK_ENV: "lease", "BINLAKE_LEASE_SECONDS": "8"}  # short, and still ample on a loaded machine
    for k, v in env.items():
        monkeypatch.setenv(k, v)  # run_cli passes os.environ on
    holder = _start_holder(stream_config, mariadb.password, env)
    lease = _lock_of(stream_config, "lease")
    try:
        _wait_for_holder(lease, holder.pid)
        time.sleep(8.5)  # past the first ttl: only background renewal keeps it
        r = run_cli("snapshot", "-c", stream_config, password=mariadb.password, timeout=120)
        assert r.returncode == 2, r.stderr
        assert f"pid {holder.pid}" in r.stderr and "lease valid until" in r.stderr
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    # A killed holder's lease blocks until it expires, then the next writer proceeds.
    deadline = time.monotonic() + 30
    while lease.holder() is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert lease.holder() is None
    monkeypatch.delenv("BINLAKE_LEASE_SECONDS")  # the default lease (60 s) for the restart
    r = run_cli("stream", "-c", stream_config, "--until", "now", password=mariadb.password, timeout=120)
    assert r.returncode == 0, r.stderr


def test_sink_path_not_writable_is_refused(mariadb, items_db, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    config = write_config(tmp_path, mariadb, items_db)
    import yaml

    raw = yaml.safe_load(Path(config).read_text())
    raw["sink"]["path"] = str(blocker / "lake")
    Path(config).write_text(yaml.safe_dump(raw))
    for command in ("snapshot", "stream", "validate"):
        r = run_cli(command, "-c", config, password=mariadb.password, timeout=120)
        assert r.returncode == 2, (command, r.stderr)
        assert "sink.path" in r.stderr and "Traceback" not in r.stderr
        assert len([x for x in r.stderr.splitlines() if x.strip()]) == 1


@pytest.fixture
def items_db(db):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY)")
    return name
