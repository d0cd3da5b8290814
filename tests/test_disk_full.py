"""Disk full on the lake: the lake lives on a small tmpfs (the tests mount one; they are skipped,
saying why, where mounting is not allowed). The snapshot and the stream each stop with one clear
line (exit 1), leave nothing half-committed (every Delta table still reads; the snapshot's
rows are exact rows of MySQL, each once; the stream's table is as of its last commit), and
resume once space is freed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.helpers import assert_equal, write_config_file

MB = 1 << 20


@pytest.fixture
def small_lake(tmp_path):
    """A folder on a tmpfs of ``size`` bytes; ``grow(size)`` frees space by resizing it."""
    mount = tmp_path / "lake_fs"
    mount.mkdir()

    def mount_it(size: int) -> Path:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs for the lake (needs root): {r.stderr.strip()}")
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
