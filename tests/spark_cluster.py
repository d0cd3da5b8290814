"""A Spark standalone cluster on loopback for the tests: one master and N workers, each
a JVM started with pyspark's own ``spark-class``, stopped (SIGTERM to its process group)
on exit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyspark

from devtools.local_mariadb import free_ports

LOOPBACK = {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_HOST": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}


@dataclass(frozen=True)
class Cluster:
    master: str  # spark://127.0.0.1:<port>
    work_dirs: tuple[Path, ...]  # one per worker: <work dir>/<app id>/<executor id>/ once it ran an executor

    @staticmethod
    def driver_env() -> dict[str, str]:
        """This process's environment, bound to loopback with the same Python: for a driver process."""
        return dict(os.environ, **LOOPBACK)


@contextmanager
def standalone_cluster(tmp_path: Path, workers: int = 2, cores: int = 1) -> Iterator[Cluster]:
    """Start a master and ``workers`` workers of ``cores`` cores and 1 GiB each on 127.0.0.1."""
    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    port, webui, *worker_uis = free_ports(2 + workers)
    env = Cluster.driver_env()
    procs = [subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(webui)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)]
    work_dirs = tuple(tmp_path / f"spark-worker-{i}" for i in range(workers))
    try:
        for work, worker_ui in zip(work_dirs, worker_uis, strict=True):
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host",
                 "127.0.0.1", "--cores", str(cores), "--memory", "1g", "--webui-port", str(worker_ui),
                 "--work-dir", str(work)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True))
        _wait_for_workers(webui, workers)
        yield Cluster(f"spark://127.0.0.1:{port}", work_dirs)
    finally:
        for p in reversed(procs):
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(30)


def _wait_for_workers(webui: int, workers: int, timeout: float = 120.0) -> None:
    """Until the master counts ``workers`` alive workers (its web UI's JSON): an application
    started before a worker registered gets no executor there (a loaded machine starts JVMs slowly)."""
    deadline, alive = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{webui}/json/", timeout=5) as r:
                alive = json.load(r).get("aliveworkers")
            if alive == workers:
                return
        except (OSError, ValueError):
            pass  # the master's web UI is not up yet, or not serving its JSON yet
        time.sleep(0.5)
    raise RuntimeError(f"the Spark master counts {alive} alive workers after {timeout:.0f} s, not {workers}")
