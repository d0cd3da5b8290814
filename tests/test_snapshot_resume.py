"""Kill the snapshot (SIGKILL) mid-way and run it again: only unfinished chunks are
read again, no row is duplicated, and Delta equals MySQL. (The snapshot on a Spark
standalone cluster runs in tests/test_object_store.py, writing to S3.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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
