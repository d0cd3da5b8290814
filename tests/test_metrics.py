"""The stream's Prometheus endpoint (pipelines/stream/metrics.py) in the process, on the real
MariaDB and real Delta: its series count the changes made, carry the ``pipeline`` label, and
never hold the password, a row's value or the configuration beyond names; a table held by a
pending schema change is shown held, its lag growing, while another table flows at lag 0; it is off unless
``metrics.port`` is set, listens on 127.0.0.1 unless told otherwise, serves ``/metrics`` only,
and a port in use stops the start as bad input. Prometheus itself scraping ``binlake stream``:
tests/test_metrics_prometheus.py."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cdc_core.config import parse_config
from cdc_core.offset.startup import StartupError
from devtools.local_mariadb import _free_port
from pipelines.lake.writer_lock import writer_lock
from pipelines.stream import StreamEngine
from pipelines.stream.metrics import StreamMetrics, StreamObserver
from tests.test_secrets import FORMS, SECRET, _user_with_items

CONTRACT = ("binlake_lag_seconds", "binlake_changes_total", "binlake_last_checkpoint_timestamp_seconds")


def scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read().decode()


def samples(text: str) -> list:
    """Every sample of an exposition (name, labels, value)."""
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(text: str, name: str, **labels) -> float | None:
    found = [s.value for s in samples(text) if s.name == name and labels.items() <= s.labels.items()]
    return found[0] if found else None


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
    return result


def _serving(port: int) -> str | None:
    try:
        return scrape(port)
    except OSError:
        return None


def test_metrics_count_changes_and_hold_no_secret_nor_row_value(mariadb, db, make_config):
    name, conn = db
    user = _user_with_items(conn)  # 300 rows "item 1" ... "item 300"; the user's password is SECRET
    port = _free_port()
    cfg = make_config(name, source={"user": user, "password": SECRET, "startup": {"mode": "latest"}},
                      metrics={"port": port})
    lock = writer_lock(cfg.sink.path, cfg.pipeline.name, "binlake stream (test)")
    lock.acquire()
    engine = StreamEngine(cfg, max_seconds=120)
    worker = threading.Thread(target=engine.run, daemon=True)
    worker.start()
    try:
        wait_for(lambda: value(_serving(port) or "", "binlake_state", state="streaming") == 1, 60, "streaming")
        with conn.cursor() as cur:
            cur.execute("UPDATE items SET label = CONCAT('rowvalue-', id) WHERE id <= 20")
            cur.execute("DELETE FROM items WHERE id > 290")
            cur.executemany("INSERT INTO items VALUES (%s, %s)", [(1000 + i, f"rowvalue-new-{i}") for i in range(5)])
        table = f"{name}.items"
        expected = {"insert": 5, "update": 20, "delete": 10}

        def counted() -> str | None:
            text = scrape(port)
            got = {op: value(text, "binlake_changes_total", table=table, op=op) for op in expected}
            return text if got == expected else None

        text = wait_for(counted, 60, f"binlake_changes_total = {expected}")
        with pytest.raises(urllib.error.HTTPError) as not_found:
            scrape(port, "/")
        assert not_found.value.code == 404
    finally:
        engine.request_stop()
        worker.join(60)
        lock.release()
    assert not worker.is_alive()
    with pytest.raises(OSError):  # the endpoint ends with the engine
        scrape(port)

    found = samples(text)
    assert {s.name for s in found} >= {*CONTRACT, "binlake_lag_bytes", "binlake_batch_rows_bucket",
                                       "binlake_commit_duration_seconds_count", "binlake_writer_lock_info"}
    assert all(s.labels.get("pipeline") == cfg.pipeline.name for s in found), "a series without its pipeline"
    assert value(text, "binlake_lag_seconds", table=table) >= 0
    assert value(text, "binlake_table_held", table=table) == 0
    assert value(text, "binlake_batch_rows_sum") == sum(expected.values())
    assert time.time() - value(text, "binlake_last_checkpoint_timestamp_seconds") < 60
    assert value(text, "binlake_writer_lock_info", command="binlake stream (test)") == 1
    # Nothing of a row, no secret, nothing of the configuration but names.
    assert not [f for f in FORMS if f in text], "the password is served"
    assert "rowvalue" not in text and "item 1" not in text
    for setting in (cfg.sink.path, user, str(mariadb.port), mariadb.password):
        assert setting not in text, f"a setting is served: {setting}"


def test_metrics_off_by_default_on_loopback_when_set_and_a_port_in_use_is_bad_input(mariadb, db, make_config):
    name, _ = db
    raw = {"pipeline": {"name": "p"}, "source": {"user": "u", "tables": ["a\\..*"]}}
    assert parse_config(raw).metrics.port is None
    assert parse_config({**raw, "metrics": {"port": 9464}}).metrics.host == "127.0.0.1"
    assert type(StreamEngine(make_config(name)).metrics) is StreamObserver  # records nothing
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cfg = make_config(name, source={"startup": {"mode": "latest"}}, metrics={"port": taken.getsockname()[1]})
        engine = StreamEngine(cfg, max_seconds=5)
        assert isinstance(engine.metrics, StreamMetrics)
        with pytest.raises(StartupError, match=f"metrics: cannot listen on 127.0.0.1:{taken.getsockname()[1]}"):
            engine.run()


def test_a_held_table_is_shown_held_and_its_lag_grows_while_others_flow(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT)")
        cur.execute("CREATE TABLE u (id INT PRIMARY KEY, a INT)")
    port = _free_port()
    cfg = make_config(name, source={"startup": {"mode": "latest"}}, metrics={"port": port},
                      stream={"schema_changes": "external", "max_batch_seconds": 0.2})
    engine = StreamEngine(cfg, max_seconds=120)
    worker = threading.Thread(target=engine.run, daemon=True)
    worker.start()
    t, u = f"{name}.t", f"{name}.u"
    try:
        wait_for(lambda: value(_serving(port) or "", "binlake_state", state="streaming") == 1, 60, "streaming")
        with conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (1, 1)")
            cur.execute("ALTER TABLE t ADD COLUMN n INT")  # external: t waits for another process to apply it
            cur.execute("INSERT INTO t VALUES (2, 2, 2)")
            cur.execute("INSERT INTO u VALUES (1, 1)")

        def held() -> str | None:
            text = scrape(port)
            flowed = value(text, "binlake_changes_total", table=u, op="insert") == 1
            return text if flowed and value(text, "binlake_table_held", table=t) == 1 else None

        text = wait_for(held, 60, f"{t} held and {u} streamed")
        time.sleep(2)
        later = scrape(port)
    finally:
        engine.request_stop()
        worker.join(60)
    assert value(text, "binlake_tables_held") == 1 and value(text, "binlake_held_rows") == 1
    assert value(text, "binlake_table_held", table=u) == 0 and value(text, "binlake_lag_seconds", table=u) == 0
    assert value(text, "binlake_changes_total", table=t, op="insert") == 1  # the row before the DDL
    assert value(later, "binlake_lag_seconds", table=t) >= value(text, "binlake_lag_seconds", table=t) + 1.9
    assert value(later, "binlake_source_idle_seconds") == 0  # t's row waits for its commit
