"""The Spark session binlake's jobs run on: ``local[*]`` unless a master is given
(config ``spark.master`` or ``BINLAKE_SPARK_MASTER``, e.g. ``spark://host:7077``). No
Hadoop or Delta jars are needed: tasks write Parquet through delta-rs's object store
(pipelines/lake/storage.py) and the driver commits through pipelines/lake/. Executors need the
same Python with binlake installed (at the driver's interpreter path, or set
``PYSPARK_PYTHON`` to theirs before binlake starts), and network access to MySQL and to
the lake.

binlake's own jobs (the snapshot, backfill reads) are RDD jobs of Python functions: they need
a ``SparkContext`` only. ``get_spark_context`` starts just that, without the SQL session
(its catalog and session state are seconds of JVM class loading that no binlake job uses:
bench/snapshot.py --whole-process)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from cdc_core.config import BinlakeConfig

if TYPE_CHECKING:  # pyspark is imported where Spark starts: `binlake snapshot` on the local runner never does
    from pyspark import SparkContext
    from pyspark.sql import SparkSession


def spark_settings(master: str | None = None, conf: dict[str, str] | None = None) -> dict[str, str]:
    """The Spark settings of binlake's session (also given to dagster-pyspark's resource).
    Points ``PYSPARK_PYTHON`` at this interpreter when unset: executors must run the same
    interpreter (and so the same installed binlake)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return {
        "spark.master": master or os.environ.get("BINLAKE_SPARK_MASTER", "local[*]"),
        "spark.app.name": "binlake",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.scheduler.mode": "FAIR",  # chunk groups run as concurrent jobs
        "spark.python.worker.reuse": "true",
        # workers forked with binlake's task modules already imported (pipelines/spark/daemon.py)
        "spark.python.daemon.module": "pipelines.spark.daemon",
        **(conf or {}),
    }


def get_spark(master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """Get or create the process's Spark session."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for k, v in spark_settings(master, conf).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def get_spark_context(master: str | None = None, conf: dict[str, str] | None = None) -> SparkContext:
    """Get or create the process's SparkContext, without starting a SQL session (a session
    built later in the process, e.g. by :func:`get_spark`, runs on this context)."""
    from pyspark import SparkConf, SparkContext

    sc = SparkContext.getOrCreate(SparkConf().setAll(list(spark_settings(master, conf).items())))
    sc.setLogLevel("WARN")
    return sc


def snapshot_on_spark(cfg: BinlakeConfig, spark: SparkSession | SparkContext | None = None) -> bool:
    """Whether the snapshot's chunk groups run as Spark tasks (``source.snapshot.runner``).
    ``auto``: on a cluster master only; on ``local[...]`` Spark adds a JVM and Python workers
    on the driver's own cores, not cores, so groups run in threads of the binlake process and
    no Spark starts (bench/snapshot.py --whole-process). ``spark`` given: its master decides."""
    runner = cfg.source.snapshot.runner
    if runner != "auto":
        return runner == "spark"
    master = context_of(spark).master if spark is not None else spark_settings(cfg.spark.master,
                                                                                cfg.spark.conf)["spark.master"]
    return not master.startswith("local")


def context_of(spark: SparkSession | SparkContext) -> SparkContext:
    """The SparkContext of a session (Dagster's, the tests'), or the context itself."""
    from pyspark import SparkContext  # imported already: ``spark`` is one of its objects

    return spark if isinstance(spark, SparkContext) else spark.sparkContext
