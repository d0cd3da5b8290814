"""Test helpers: run a snapshot and compare every captured table with MySQL."""

from __future__ import annotations

from cdc_core.config import BinlakeConfig
from cdc_core.table_schema import describe_table
from pipelines.delta_sink import table_uri
from pipelines.reconcile import TableDiff, compare
from pipelines.snapshot_job import SnapshotJob, connect, connection_settings


def snapshot(cfg: BinlakeConfig, spark):
    return SnapshotJob(cfg, spark).run()


def diff_tables(cfg: BinlakeConfig, names: list[str]) -> list[TableDiff]:
    with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
        return [compare(cur, describe_table(cur, *n.split(".", 1)), table_uri(cfg.sink.path, n)) for n in names]


def assert_equal(cfg: BinlakeConfig, names: list[str]) -> None:
    diffs = diff_tables(cfg, names)
    bad = [d.describe() for d in diffs if not d.equal]
    assert not bad, "\n".join(bad)
    assert all(d.mysql_rows == d.delta_rows for d in diffs)
