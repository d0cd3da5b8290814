"""Disk full on the lake: the lake lives on a small tmpfs. As root the test mounts one; without
root (an unprivileged CI) it runs itself again in a user and mount namespace of its own
(``unshare --user --map-root-user --mount``), where it may mount one, with a MariaDB of that run;
only where neither is allowed is it skipped, saying why (``-rs`` puts the reason in the
summary). The snapshot and the stream each stop with one clear line (exit 1), leave nothing
half-committed (every Delta table still reads; the snapshot's rows are exact rows of MySQL,
each once; the stream's table is as of its last commit), and resume once space is freed.

``BINLAKE_DISK_FULL_NAMESPACE=1`` takes the namespace path even as root (to test it)."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.helpers import assert_equal, write_config_file

MB = 1 << 20
INSIDE = "BINLAKE_DISK_FULL_INSIDE"  # set in the run inside the namespace
FORCE = "BINLAKE_DISK_FULL_NAMESPACE"
UNSHARE = ["unshare", "--user", "--map-root-user", "--mount"]


def _can_mount(where: Path) -> str | None:
    """None when this process may mount a tmpfs at ``where``; else why not."""
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        return r.stderr.strip() or f"mount exited {r.returncode}"
    subprocess.run(["umount", str(where)], check=True)
    return None


def with_a_tmpfs(test):
    """Run ``test`` where it may mount a tmpfs: here (root, or already inside the namespace),
    else as a pytest run of its own inside a new user and mount namespace; skipped, saying
    why, where neither is allowed."""

    @functools.wraps(test)
    def run(*args, tmp_path: Path, **kwargs):
        probe = tmp_path / "probe"
        probe.mkdir()
        refused = "the namespace path is asked for" if os.environ.get(FORCE) and not os.environ.get(INSIDE) \
            else _can_mount(probe)
        if refused is None:
            return test(*args, tmp_path=tmp_path, **kwargs)
        if os.environ.get(INSIDE):
            pytest.fail(f"cannot mount a tmpfs inside the namespace: {refused}")
        if subprocess.run([*UNSHARE, "true"], capture_output=True).returncode != 0:
            pytest.skip(f"cannot mount a tmpfs for the lake (not root: {refused}) nor make a user namespace "
                        "(unshare --user --map-root-user)")
        inner = subprocess.run(
            [*UNSHARE, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
             f"--basetemp={tmp_path / 'inside'}", f"{__file__}::{test.__name__}"],
            capture_output=True, text=True, env={**os.environ, INSIDE: "1"}, cwd=Path(__file__).parent.parent,
            timeout=1200)
        said = f"inside a user and mount namespace:\n{inner.stdout[-6000:]}{inner.stderr[-3000:]}"
        assert inner.returncode == 0 and re.search(r"\b1 passed\b", inner.stdout), said

    return run


@pytest.fixture
def small_lake(tmp_path):
    """A folder on a tmpfs of ``size`` bytes; ``grow(size)`` frees space by resizing it."""
    mount = tmp_path / "lake_fs"
    mount.mkdir()

    def mount_it(size: int) -> Path:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True)
        return mount

    def grow(size: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)

    mount_it.grow = grow
    yield mount_it
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _cli(*args: str, password: str) -> subprocess.CompletedProcess:
    from tests.test_cli import BINLAKE

    env = {**os.environ, "BINLAKE_TEST_PASSWORD": password, "COLUMNS": "200"}
    return subprocess.run([BINLAKE, *args], capture_output=True, text=True, env=env, timeout=600)


def _assert_clear_disk_full(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 1, r.stderr[-3000:]
    lines = [x for x in r.stderr.splitlines() if x.startswith("error")]
    assert len(lines) == 1 and "no space left" in lines[0].lower(), r.stderr[-3000:]
    assert "Traceback" not in r.stderr


def _blob() -> str:
    return os.urandom(150_000).hex()  # incompressible: 300 KB per row in Parquet too


@with_a_tmpfs
def test_snapshot_disk_full_then_resume(mariadb, db, make_config, small_lake, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, payload LONGTEXT)")
        for i in range(1, 61):
            cur.execute("INSERT INTO big VALUES (%s, %s)", (i, _blob()))  # about 18 MB
    lake = small_lake(6 * MB)
    # One chunk (about 0.9 MB of Parquet) per group, one group at a time: groups commit one by one
    # until the disk is full, whatever the machine's speed.
    cfg = make_config(name, chunk_size=3, parallelism=1, sink={"path": str(lake / "lake")},
                      source={"snapshot": {"chunk_size": 3, "max_rows_per_task": 3}}, spark={"master": "local[2]"})
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    r = _cli("snapshot", "-c", path, password=mariadb.password)
    _assert_clear_disk_full(r)

    # Nothing half-committed: the table reads, and each row in it is MySQL's row, once.
    dt = DeltaTable(str(lake / "lake" / name / "big"))
    rows = dt.to_pyarrow_table(columns=["id", "payload"]).to_pylist()
    ids = [r["id"] for r in rows]
    assert 0 < len(ids) < 60 and len(ids) == len(set(ids))
    with conn.cursor() as cur:
        cur.execute("SELECT id, payload FROM big")
        mysql = dict(cur.fetchall())
    assert all(mysql[r["id"]] == r["payload"] for r in rows)

    small_lake.grow(200 * MB)
    r = _cli("snapshot", "-c", path, password=mariadb.password)
    assert r.returncode == 0, r.stderr[-3000:]
    assert_equal(cfg, [f"{name}.big"])



@with_a_tmpfs
def test_stream_disk_full_then_resume(mariadb, db, make_config, small_lake, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, payload LONGTEXT)")
        cur.executemany("INSERT INTO t VALUES (%s, 'small')", [(i,) for i in range(1, 101)])
    lake = small_lake(8 * MB)
    cfg = make_config(name, sink={"path": str(lake / "lake")}, spark={"master": "local[2]"},
                      stream={"max_batch_rows": 100_000, "max_batch_seconds": 30})
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    assert _cli("snapshot", "-c", path, password=mariadb.password).returncode == 0
    with conn.cursor() as cur:
        cur.execute("UPDATE t SET payload = 'phase 1' WHERE id <= 20")
    assert _cli("stream", "-c", path, "--until", "now", password=mariadb.password).returncode == 0
    assert_equal(cfg, [f"{name}.t"])
    with conn.cursor() as cur:
        cur.execute("SELECT id, payload FROM t")
        before = dict(cur.fetchall())
        conn.begin()  # one transaction of about 18 MB: more than the lake has left
        for i in range(1, 61):
            cur.execute("UPDATE t SET payload = %s WHERE id = %s", (_blob(), i))
        conn.commit()

    r = _cli("stream", "-c", path, "--until", "now", password=mariadb.password)
    _assert_clear_disk_full(r)
    # Nothing half-committed: the table reads and is as of its last commit, before the big transaction.
    rows = DeltaTable(str(lake / "lake" / name / "t")).to_pyarrow_table(columns=["id", "payload"]).to_pylist()
    assert {r["id"]: r["payload"] for r in rows} == before

    small_lake.grow(200 * MB)
    r = _cli("stream", "-c", path, "--until", "now", password=mariadb.password)
    assert r.returncode == 0, r.stderr[-3000:]
    assert_equal(cfg, [f"{name}.t"])
