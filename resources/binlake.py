"""Dagster resources: the binlake config (source MySQL, lake) and the Spark session."""

from __future__ import annotations

import os

from dagster import ConfigurableResource

from cdc_core.config import BinlakeConfig, load_config


def config_path() -> str:
    """The config file the code location uses: ``BINLAKE_CONFIG`` or ./binlake.yaml."""
    return os.environ.get("BINLAKE_CONFIG", "binlake.yaml")


class BinlakeConfigResource(ConfigurableResource):
    """The pipeline's YAML config (source MySQL, sink lake, snapshot settings)."""

    path: str

    def load(self) -> BinlakeConfig:
        return load_config(self.path)


class SparkResource(ConfigurableResource):
    """The Spark session snapshot chunks run on (``local[*]`` unless a master is set)."""

    master: str | None = None

    def session(self, cfg: BinlakeConfig):
        from pipelines.spark_session import get_spark

        return get_spark(self.master or cfg.spark.master, cfg.spark.conf)
