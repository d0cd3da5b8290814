"""binlake's Spark settings (pipelines/spark/session.py): executors fork Python workers from
binlake's preloading daemon (pipelines/spark/daemon.py); where the snapshot's groups run."""

from __future__ import annotations


def test_python_workers_fork_from_the_preloading_daemon(spark):
    def _worker_facts(_: int) -> tuple[str, bool]:
        """In a Python worker (pickled by value: this test module is not importable there): its
        parent's command line (the daemon) and whether binlake's task module is loaded."""
        import os
        import sys

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read().replace(b"\0", b" ").decode()
        return parent, "pipelines.snapshot.task" in sys.modules

    facts = spark.sparkContext.parallelize([0, 1], 2).map(_worker_facts).collect()
    for parent, preloaded in facts:
        assert "pipelines.spark.daemon" in parent
        assert preloaded


def test_failed_preload_is_skipped(caplog):
    from pipelines.spark.daemon import preload

    preload(("binlake_no_such_module", "json"))
    assert "binlake_no_such_module not preloaded" in caplog.text


def test_snapshot_runner_follows_the_master(make_config):
    """``source.snapshot.runner``: ``auto`` runs groups on Spark for a cluster master only (on
    ``local[...]`` Spark brings no cores of its own); ``spark`` and ``local`` say it outright."""
    from pipelines.spark.session import snapshot_on_spark

    def on_spark(runner: str, master: str) -> bool:
        cfg = make_config("d", source={"snapshot": {"runner": runner}}, spark={"master": master})
        return snapshot_on_spark(cfg)

    assert not on_spark("auto", "local[*]") and not on_spark("auto", "local[2]")
    assert on_spark("auto", "spark://127.0.0.1:7077")
    assert on_spark("spark", "local[*]") and not on_spark("local", "spark://127.0.0.1:7077")
