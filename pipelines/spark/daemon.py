"""Spark's Python daemon for binlake's sessions (``spark.python.daemon.module``, set by
pipelines/spark/session.py): pyspark's own daemon, started once per executor, which forks a
Python worker for each task slot, but after importing what binlake's tasks import.

The forked workers inherit these modules, so a worker's first task no longer imports pyarrow,
delta-rs, connectorx, pymysql and binlake itself: on two cores each fresh worker spent
seconds there before its first chunk group started, every worker at the same time
(bench/snapshot.py --whole-process). Forking after these imports: the only threads they
start are OpenBLAS's and jemalloc's background threads (pyarrow's allocator), both libraries
made for fork (pthread_atfork handlers); the thread pools of pyarrow, delta-rs and
connectorx start on first use, in the worker.

A module that cannot be imported here is left to the task that needs it (it fails there,
with its own error, as without this daemon): other PySpark code on the same session runs."""

from __future__ import annotations

import importlib
import logging

from pyspark import daemon

log = logging.getLogger(__name__)

# What a snapshot group and a backfill read import (pipelines/snapshot/task.py run_group,
# pipelines/backfill/reads.py read_chunk), and the worker loop every task runs in.
PRELOAD = ("pyspark.worker", "pipelines.snapshot.task", "pipelines.backfill.reads", "connectorx")


def preload(modules: tuple[str, ...] = PRELOAD) -> None:
    """Import ``modules``; one that fails is skipped with a warning (logging writes to stderr:
    the daemon's stdout carries its port to the JVM and must hold nothing else)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - the task that needs it reports it
            log.warning("binlake spark daemon: %s not preloaded: %s: %s", name, type(e).__name__, e)


if __name__ == "__main__":
    preload()
    daemon.manager()
