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


def get_spark(master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """Get or create the process's Spark session."""
    # Executors must run the same interpreter (and so the same installed binlake).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master or os.environ.get("BINLAKE_SPARK_MASTER", "local[*]"))
        .appName("binlake")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.scheduler.mode", "FAIR")  # chunk groups run as concurrent jobs
        .config("spark.python.worker.reuse", "true")
    )
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
