"""The Spark session binlake's jobs run on: ``local[*]`` unless a master is given
(config ``spark.master`` or ``BINLAKE_SPARK_MASTER``, e.g. ``spark://host:7077``). No
Hadoop or Delta jars are needed: tasks write Parquet through delta-rs's object store
(pipelines/lake_storage.py) and the driver commits with deltalake. Executors need the
same Python with binlake installed (at the driver's interpreter path, or set
``PYSPARK_PYTHON`` to theirs before binlake starts), and network access to MySQL and to
the lake."""

from __future__ import annotations

import os
import sys

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
        **(conf or {}),
    }


def get_spark(master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """Get or create the process's Spark session."""
    builder = SparkSession.builder
    for k, v in spark_settings(master, conf).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
