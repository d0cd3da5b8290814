"""Prometheus (Debian's ``prometheus``, devtools/local_prometheus.py) scraping a running
``binlake stream`` (a subprocess on the real MariaDB, writing real Delta) every second:

- its query API returns the lag series of each table and ``binlake_changes_total`` equal, per
  table and op, to the changes made, counted by the server's own ``mariadb-binlog``
  (tests/change_count.py); Delta equals MySQL row by row;
- every query of the shipped Grafana dashboard (deploy/grafana/) is valid PromQL with answers;
- the shipped alert rules (deploy/prometheus/binlake-rules.yml) pass ``promtool check rules``,
  load in Prometheus and evaluate healthy, firing nothing while the stream runs; once the stream
  is stopped, "no checkpoint" and "endpoint down" fire (the test's copy has short bounds and
  ``for:`` durations).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import yaml

from cdc_core.config import load_config
from cdc_core.offset.position import master_position
from cdc_core.source.connection import connect, connection_settings
from devtools.local_mariadb import _free_port
from devtools.local_prometheus import LocalPrometheus, prometheus_binary
from pipelines.stream.metrics import OP_NAMES
from tests.change_count import binlog_changes
from tests.helpers import assert_equal
from tests.test_cli import BINLAKE, PASSWORD_VAR, write_config
from tests.test_metrics import wait_for

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "deploy" / "prometheus" / "binlake-rules.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "binlake-dashboard.json"
# The test's copy of the rules: bounds in seconds the test can wait for, and short `for:`.
SHORT = {"> 900": "> 4", "> 600": "> 2", "> 300": "> 30"}


def _short_rules(path: Path) -> Path:
    doc = yaml.safe_load(RULES.read_text())
    for rule in doc["groups"][0]["rules"]:
        rule["for"] = "1s"
        for bound, short in SHORT.items():
            rule["expr"] = rule["expr"].replace(bound, short)
    text = yaml.safe_dump(doc)
    assert not any(bound in text for bound in SHORT), "a bound of the rules was not shortened"
    path.write_text(text)
    return path


def _changes(prometheus: LocalPrometheus, pipeline: str) -> dict[tuple[str, str], int]:
    return {(s["metric"]["table"], s["metric"]["op"]): int(float(s["value"][1]))
            for s in prometheus.query(f'binlake_changes_total{{pipeline="{pipeline}"}} > 0')}


def _alerts(prometheus: LocalPrometheus) -> dict[str, str]:
    return {a["labels"]["alertname"]: a["state"] for a in prometheus.api("alerts")["alerts"]}


def test_prometheus_scrapes_the_stream_and_the_shipped_rules_fire_when_it_stops(mariadb, db, tmp_path):
    name, conn = db
    tables = [f"{name}.orders", f"{name}.customers"]
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, qty INT NOT NULL)")
        cur.execute("CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(40))")
    port = _free_port()
    config = Path(write_config(tmp_path, mariadb, name, startup={"mode": "latest"}))
    raw = yaml.safe_load(config.read_text())
    raw["metrics"] = {"port": port}
    config.write_text(yaml.safe_dump(raw))
    os.environ[PASSWORD_VAR] = mariadb.password  # load_config below reads it as the CLI does
    cfg = load_config(config)
    pipeline = cfg.pipeline.name

    checked = subprocess.run([prometheus_binary("promtool"), "check", "rules", str(RULES)], capture_output=True,
                             text=True)
    assert checked.returncode == 0 and "SUCCESS: 4 rules found" in checked.stdout, checked.stdout + checked.stderr

    log = (tmp_path / "stream.log").open("w")
    stream = subprocess.Popen([BINLAKE, "stream", "-c", str(config)], stdout=log, stderr=subprocess.STDOUT,
                              env={**os.environ, PASSWORD_VAR: mariadb.password}, start_new_session=True)
    try:
        with LocalPrometheus([f"127.0.0.1:{port}"], [_short_rules(tmp_path / "rules.yml")]) as prometheus:
            wait_for(lambda: prometheus.query(f'binlake_state{{pipeline="{pipeline}",state="streaming"}} == 1'), 90,
                     "Prometheus to scrape a streaming binlake")
            settings = connection_settings(cfg)
            with connect(settings) as c, c.cursor() as cur:
                start = master_position(cur)
            made: dict[tuple[str, str], int] = {}
            with conn.cursor() as cur:
                for i in range(3):  # a few transactions a second apart: several batches and scrapes
                    cur.executemany("INSERT INTO orders VALUES (%s, %s)", [(i * 100 + k, k) for k in range(40)])
                    made[tables[0], "insert"] = made.get((tables[0], "insert"), 0) + cur.rowcount
                    cur.executemany("INSERT INTO customers VALUES (%s, %s)", [(i * 100 + k, "c") for k in range(7)])
                    made[tables[1], "insert"] = made.get((tables[1], "insert"), 0) + cur.rowcount
                    time.sleep(1)
                cur.execute("UPDATE orders SET qty = qty + 1 WHERE id % 3 = 0")
                made[tables[0], "update"] = cur.rowcount
                cur.execute("DELETE FROM orders WHERE id % 5 = 0")
                made[tables[0], "delete"] = cur.rowcount
                cur.execute("UPDATE customers SET name = 'd' WHERE id < 5")
                made[tables[1], "update"] = cur.rowcount
            with connect(settings) as c, c.cursor() as cur:
                end = master_position(cur)
            counted = binlog_changes(settings, start, end, set(tables))  # the server's own count
            assert {(t, OP_NAMES[op]): n for t, ops in counted.items() for op, n in ops.items() if n} == made
            wait_for(lambda: _changes(prometheus, pipeline) == made, 60, f"binlake_changes_total = {made}")

            lag = prometheus.query(f'binlake_lag_seconds{{pipeline="{pipeline}"}}')
            assert sorted(s["metric"]["table"] for s in lag) == sorted(tables)
            assert all(float(s["value"][1]) >= 0 for s in lag)
            # changes/s: every op's series counted from 0, so its first changes are in the rate too
            rates = prometheus.query(f'sum by (op) (rate(binlake_changes_total{{pipeline="{pipeline}"}}[1m])) > 0')
            assert {s["metric"]["op"] for s in rates} == {"insert", "update", "delete"}
            assert prometheus.query(f'binlake_last_checkpoint_timestamp_seconds{{pipeline="{pipeline}"}} '
                                    '> time() - 60')

            # Every query of the shipped dashboard parses and, but for the backfills, answers.
            panels = json.loads(DASHBOARD.read_text())["panels"]
            empty = []
            for panel in panels:
                for target in panel["targets"]:
                    expr = target["expr"].replace("$pipeline", pipeline).replace("$__rate_interval", "1m")
                    if not prometheus.query(expr):
                        empty.append(panel["title"])
            assert set(empty) <= {"Backfill progress", "Backfill rows written"}, empty

            groups = wait_for(lambda: [g for g in prometheus.api("rules")["groups"]
                                       if all(r["health"] == "ok" for r in g["rules"])], 30, "the rules evaluated")
            assert [r["name"] for r in groups[0]["rules"]] == ["BinlakeLagHigh", "BinlakeNoCheckpoint",
                                                                "BinlakeTableHeld", "BinlakeEndpointDown"]
            assert "firing" not in _alerts(prometheus).values(), _alerts(prometheus)

            stream.send_signal(signal.SIGTERM)
            assert stream.wait(60) == 0
            wait_for(lambda: {"BinlakeNoCheckpoint", "BinlakeEndpointDown"} <= {
                name for name, state in _alerts(prometheus).items() if state == "firing"}, 60,
                "no checkpoint and endpoint down to fire")
    finally:
        if stream.poll() is None:
            stream.kill()
            stream.wait()
        log.close()
    assert_equal(cfg, tables)
