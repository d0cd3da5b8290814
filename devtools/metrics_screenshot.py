"""The screenshot of docs/metrics.md: Prometheus's graph of a running stream, taken with
headless Chromium into docs/screenshots/prometheus-stream.png.

A throwaway MariaDB with the demo's shop schema (devtools/demo.py), ``binlake run`` on it with
``metrics.port`` set (snapshot, then the stream), a throwaway Prometheus scraping it every
second (devtools/local_prometheus.py) and the demo's live traffic at three rates in turn, so the
graph shows the rate change; then Prometheus's graph page with two panels: the lag per table
(``binlake_lag_seconds``) and the changes per second by op (``rate(binlake_changes_total)``).
Everything lives in a temporary folder and is stopped at the end. Needs Debian's ``prometheus``
and ``chromium``, and Python's ``playwright`` (as devtools/screenshots.py, which installs them).
Run from the repository root: ``.venv/bin/python devtools/metrics_screenshot.py``.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.demo import Traffic, load_shop  # noqa: E402
from devtools.local_mariadb import LocalMariaDB, _free_port  # noqa: E402
from devtools.local_prometheus import LocalPrometheus  # noqa: E402
from devtools.screenshots import CHROMIUM, FLAGS, OUT, install  # noqa: E402

PASSWORD_VAR = "BINLAKE_METRICS_PASSWORD"
PIPELINE = "shop_metrics"
# Seconds of traffic at each pause between the demo's operations: busy, quiet, busier.
PHASES = ((45, 0.01), (45, 0.05), (45, 0.003))
PANELS = (f'binlake_lag_seconds{{pipeline="{PIPELINE}"}}',
          f'sum by (op) (rate(binlake_changes_total{{pipeline="{PIPELINE}"}}[15s]))')


def graph_url(prometheus: LocalPrometheus, minutes: int) -> str:
    params = {}
    for i, expr in enumerate(PANELS):
        params |= {f"g{i}.expr": expr, f"g{i}.tab": "0", f"g{i}.range_input": f"{minutes}m",
                   f"g{i}.stacked": "0", f"g{i}.show_exemplars": "0"}
    return f"{prometheus.url}/graph?{urllib.parse.urlencode(params)}"


def main() -> int:
    install()
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="binlake-metrics-shot-"))
    server = LocalMariaDB(server_id=1, extra_args=("--innodb-buffer-pool-size=128M",))
    stream = traffic = None
    try:
        server.start()
        with server.connect() as conn:
            load_shop(conn, random.Random(42))
        os.environ[PASSWORD_VAR] = server.password
        port = _free_port()
        config = work / "binlake.yaml"
        config.write_text(yaml.safe_dump({
            "pipeline": {"name": PIPELINE, "parallelism": 2},
            "source": {"host": server.host, "port": server.port, "user": server.user,
                       "password": f"${{{PASSWORD_VAR}}}", "server_id": 5400, "tables": [r"shop\..*"],
                       "snapshot": {"chunk_size": 500, "runner": "local"}},
            "sink": {"path": str(work / "lake")},
            "metrics": {"port": port}}, sort_keys=False))
        binlake = str(Path(sys.executable).with_name("binlake"))
        log = (work / "binlake.log").open("w")
        stream = subprocess.Popen([binlake, "run", "-c", str(config)], stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        with LocalPrometheus([f"127.0.0.1:{port}"]) as prometheus:
            deadline = time.monotonic() + 180
            while not prometheus.query(f'binlake_state{{pipeline="{PIPELINE}",state="streaming"}} == 1'):
                if stream.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"binlake run did not stream: {(work / 'binlake.log').read_text()[-2000:]}")
                time.sleep(1)
            traffic = Traffic(server, random.Random(7)).start()
            for seconds, pause in PHASES:
                traffic.pause = pause
                print(f"traffic: a pause of {pause} s between operations for {seconds} s", flush=True)
                time.sleep(seconds)
            traffic.stop()
            time.sleep(5)
            minutes = int(sum(s for s, _ in PHASES) / 60) + 1
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
                page = browser.new_page(viewport={"width": 1400, "height": 1250})
                page.goto(graph_url(prometheus, minutes), wait_until="networkidle")
                page.wait_for_timeout(3000)
                OUT.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(OUT / "prometheus-stream.png"), full_page=True)
                browser.close()
            print("docs/screenshots/prometheus-stream.png", flush=True)
    finally:
        if traffic is not None:
            traffic.stop()
        if stream is not None and stream.poll() is None:
            stream.send_signal(signal.SIGTERM)
            try:
                stream.wait(60)
            except subprocess.TimeoutExpired:
                stream.kill()
                stream.wait()
        server.cleanup()
        shutil.rmtree(work, ignore_errors=True)
        os.environ.pop(PASSWORD_VAR, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
