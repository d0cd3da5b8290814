"""A throwaway Prometheus server: scraping binlake's stream in tests/test_metrics_prometheus.py
and for the metrics screenshot (devtools/metrics_screenshot.py).

Starts Debian's Prometheus (package ``prometheus``) on a free loopback port with a configuration
and a storage directory of its own in a temporary folder: one scrape job (``binlake`` unless
named otherwise) over the given targets, scraped and its rules evaluated every ``interval``
seconds; stops it (SIGTERM, then SIGKILL) and removes the folder.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from devtools.local_mariadb import _free_port

log = logging.getLogger(__name__)


def prometheus_binary(name: str = "prometheus") -> str:
    """Debian's ``prometheus`` (or ``promtool``), or an error saying what to install."""
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if not found:
        raise RuntimeError(f"{name} not found: install Debian's prometheus (apt-get install prometheus)")
    return found


@dataclass
class LocalPrometheus:
    """A private Prometheus; use as a context manager or call start()/stop()."""

    targets: list[str]  # host:port of each /metrics endpoint
    rule_files: list[Path] = field(default_factory=list)
    interval: float = 1.0  # seconds between scrapes and between rule evaluations
    job: str = "binlake"
    port: int = field(default_factory=_free_port)
    base_dir: Path | None = None
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalPrometheus:
        """Write the configuration, start Prometheus and wait until it is ready; stopped again if that fails."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> LocalPrometheus:
        self.base_dir = Path(tempfile.mkdtemp(prefix="binlake-prometheus-"))
        every = f"{int(self.interval * 1000)}ms"
        config = {"global": {"scrape_interval": every, "evaluation_interval": every, "scrape_timeout": every},
                  "rule_files": [str(p) for p in self.rule_files],
                  "scrape_configs": [{"job_name": self.job, "static_configs": [{"targets": self.targets}]}]}
        (self.base_dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        log_file = (self.base_dir / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [prometheus_binary(), f"--config.file={self.base_dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.base_dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        log_file.close()
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Prometheus did not start: {self.log()[-2000:]}")
            time.sleep(0.2)
        log.info("Prometheus on %s scraping %s", self.url, self.targets)
        return self

    def api(self, path: str, **params: str) -> dict:
        """The ``data`` of a Prometheus HTTP API answer (``/api/v1/<path>``); an error names Prometheus's."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as r:
                answer = json.load(r)
        except urllib.error.HTTPError as e:
            answer = json.load(e)
        if answer.get("status") != "success":
            raise RuntimeError(f"Prometheus {path} {params}: {answer.get('errorType')}: {answer.get('error')}")
        return answer["data"]

    def query(self, expr: str) -> list[dict]:
        """An instant query's series: each ``{"metric": labels, "value": [time, "text"]}``."""
        return self.api("query", query=expr)["result"]

    def log(self) -> str:
        path = self.base_dir / "prometheus.log" if self.base_dir else None
        return path.read_text(errors="replace") if path and path.exists() else ""

    def stop(self) -> None:
        """Stop Prometheus and remove its folder."""
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
        if self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    def __enter__(self) -> LocalPrometheus:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
