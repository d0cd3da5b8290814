"""Kill the snapshot (SIGKILL) mid-way and run it again: only unfinished chunks are
read again, no row is duplicated, and Delta equals MySQL. Also runs the snapshot on a
Spark standalone master with a worker on loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark
from deltalake import DeltaTable

from pipelines.control_store import ControlStore
from pipelines.delta_sink import table_uri
from tests.helpers import assert_equal, snapshot, write_config_file


def _binlake(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli", *args]


def test_kill_and_resume(db, spark, make_config, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(40))")
        cur.execute("INSERT INTO big SELECT seq, CONCAT('row ', seq) FROM seq_1_to_60000")
    cfg = make_config(name, chunk_size=250, parallelism=1,
                      source={"snapshot": {"chunk_size": 250, "max_rows_per_task": 2000}})
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    log_dir = Path(table_uri(cfg.sink.path, f"{name}.big")) / "_delta_log"
    proc = subprocess.Popen(_binlake("snapshot", "-c", str(path)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        # Kill once a few data commits have landed (version 0 creates the table).
        while time.monotonic() < deadline and len(list(log_dir.glob("*.json"))) < 4:
            assert proc.poll() is None, "snapshot finished before it could be killed; make the table bigger"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    plan = ControlStore(cfg.sink.path, cfg.pipeline.name).load_plans()[f"{name}.big"]
    partial = DeltaTable(table_uri(cfg.sink.path, f"{name}.big")).to_pyarrow_table()
    assert 0 < partial.num_rows < 60000
    summary = snapshot(cfg, spark)  # resume
    t = summary.tables[0]
    assert t.chunks == len(plan) and 0 < t.chunks_read < t.chunks  # only unfinished chunks re-read
    assert t.delta_rows == 60000
    assert_equal(cfg, [f"{name}.big"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_snapshot_on_standalone_master(db, make_config, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v DOUBLE)")
        cur.execute("INSERT INTO t SELECT seq, seq / 7 FROM seq_1_to_3000")
    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    port = _free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_MASTER_HOST="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(_free_port())], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                               "--host", "127.0.0.1", "--cores", "2", "--memory", "1g",
                               "--webui-port", str(_free_port()), "--work-dir", str(tmp_path / "work")], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        cfg = make_config(name, chunk_size=500)
        path = write_config_file(cfg, tmp_path / "binlake.yaml", spark={"master": f"spark://127.0.0.1:{port}"})
        out = subprocess.run(_binlake("snapshot", "-c", str(path)), env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "match" in out.stdout
        assert_equal(cfg, [f"{name}.t"])
    finally:
        for p in (worker, master):
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(30)
