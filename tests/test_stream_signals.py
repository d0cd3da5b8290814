"""A stop signal sent to ``binlake stream``'s whole process group (what a supervisor, a
terminal's Ctrl-C or ``kill -- -PGID`` does) reaches the engine and its binlog reader
process at once. It is a stop: the run commits what it read, exits 0 and says which
signal stopped it; it never takes the reader's end for a lost connection and reconnects.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from pipelines.lake.tables import table_uri
from tests.helpers import assert_equal, write_config_file
from tests.test_stream_crash import STREAM, Stream, replica_registered, run_stream, wait_for


class Inserts(threading.Thread):
    """Inserts and updates rows until stopped, so the reader is busy when the signal lands."""

    def __init__(self, server, database: str):
        super().__init__(name="inserts", daemon=True)
        self.server, self.database = server, database
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.server.connect(self.database) as conn, conn.cursor() as cur:
                n = 0
                while not self.stop_event.is_set():
                    cur.executemany("INSERT INTO t VALUES (%s, 0, 'row')", [(n + i,) for i in range(50)])
                    cur.execute("UPDATE t SET counter = counter + 1 WHERE id BETWEEN %s AND %s", (n - 25, n + 24))
                    n += 50
                    time.sleep(0.02)  # a steady load; the catch-up at the end stays small
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self.error = e

    def stop(self) -> None:
        self.stop_event.set()
        if self.ident is None:  # never started
            return
        self.join(30)
        assert not self.is_alive(), "the writer did not stop"
        if self.error is not None:
            raise AssertionError(f"the writer failed: {self.error!r}") from self.error


ROUNDS = 3  # the writer runs on between rounds: each later run starts on a backlog, its reader busy


def signalled_run(config: str, logs: Path, sig: signal.Signals, password: str, ready: Callable[[], bool]) -> Stream:
    """One ``binlake stream`` run, signalled as a whole process group once ``ready()``."""
    s = Stream(config, logs, password=password)
    try:
        wait_for(lambda: ready() or not s.alive(), 60, "the stream to commit")
        assert s.alive(), s.describe()
        os.killpg(s.proc.pid, sig)  # the engine and its reader process, as a supervisor does
        s.wait(60)
    finally:
        s.kill()  # whatever is left of its process group
    return s


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_stop_signal_to_the_process_group_is_a_clean_stop(sig, mariadb, db, make_config, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, counter INT NOT NULL DEFAULT 0, v VARCHAR(20))")
    cfg = make_config(name, stream=STREAM, source={"startup": {"mode": "latest"}})
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    logs, uri = tmp_path / "logs", table_uri(cfg.sink.path, f"{name}.t")
    writer = Inserts(mariadb, name)

    def version() -> int:
        return DeltaTable(uri).version() if os.path.isdir(uri) else -1

    def committed_after(v: int) -> Callable[[], bool]:
        def ready() -> bool:
            # A stream from "latest" reads only what is written once it is connected: write from then on.
            if writer.ident is None and replica_registered(mariadb, cfg.source.server_id):
                writer.start()
            return version() > v
        return ready

    try:
        for _ in range(ROUNDS):
            # Version 0 is the table the stream creates: wait for a commit of rows after it.
            s = signalled_run(config, logs, sig, mariadb.password, committed_after(max(version(), 0)))
            assert s.proc.returncode == 0, s.describe()
            assert "reconnecting" not in s.stdout + s.stderr, s.describe()
            assert "0 reconnects" in s.stdout and f"stopped: stopped by {sig.name}" in s.stdout, s.describe()
    finally:
        writer.stop()
    # Each stopped run committed a prefix of the binlog with its checkpoint: a catch-up run ends
    # equal to MySQL.
    final = run_stream(config, logs, "--until", "now", password=mariadb.password)
    assert final.proc.returncode == 0, final.describe()
    assert_equal(cfg, [f"{name}.t"])
