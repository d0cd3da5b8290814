"""The snapshot as partitions: each table asset's partitions are its snapshot chunks.
``snapshot_partitions_sensor`` plans the chunks of tables that have no plan yet (the
chunk planner, against the source, at tick time, never at load) and adds them as the
table's dynamic partitions. Materialising any set of partitions runs them in one run
(single-run backfill policy) on Spark; each partition is materialised when its chunk is
committed, so a failed chunk can be re-run alone and the partition status shows what is done.

Tests: tests/test_dagster_snapshot.py.
"""

import inspect

from dagster import (
    AddDynamicPartitionsRequest,
    AssetExecutionContext,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    DefaultSensorStatus,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    multi_asset,
    sensor,
)
from dagster_pyspark import LazyPySparkResource

from resources.binlake import BinlakeResource
from resources.translator import chunk_index, chunk_partition_key, chunk_partitions, table_of


def _snapshot(context: AssetExecutionContext, binlake: BinlakeResource, pyspark: LazyPySparkResource):
    table = table_of(context.asset_key)
    chunks = sorted(chunk_index(k) for k in context.partition_keys)
    s = binlake.snapshot_chunks(context, pyspark, table, chunks)
    context.log.info(f"{table}: {len(chunks)} chunk(s) done ({s.chunks_read} read now, {s.rows_written:,} rows); "
                     f"Delta {s.delta_rows:,} rows, MySQL {s.mysql_rows:,} rows")
    yield from ()  # each partition was materialised when its chunk committed: no output of its own


# Dagster inspects an op function's signature some 14 times per op it builds; one function for
# every table, its signature computed once here, saves most of that (2,000 tables: ~0.6 s).
_snapshot.__signature__ = inspect.signature(_snapshot)


def snapshot_asset(spec: AssetSpec) -> AssetsDefinition:
    """The asset of one captured table: materialising chunk partitions snapshots those chunks."""
    return multi_asset(specs=[spec], name="snapshot__" + "__".join(spec.key.path),
                       backfill_policy=BackfillPolicy.single_run())(_snapshot)


@sensor(minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING,
        description="Plans the snapshot chunks of tables without a plan and adds them as the tables' partitions")
def snapshot_partitions_sensor(context: SensorEvaluationContext, binlake: BinlakeResource):
    """Add each table's planned chunks as its dynamic partitions (planning the unplanned ones)."""
    from pipelines.snapshot.plan import plan_snapshot

    cfg = binlake.load()
    names = list(binlake.tables(cfg))
    if not names:
        return SkipReason("no captured tables in the table catalog: run binlake_refresh_tables")
    try:
        plans = plan_snapshot(cfg, names)
    except Exception as e:  # noqa: BLE001 - the source may be down: say so on the tick, try again next time
        return SkipReason(f"cannot plan snapshot chunks: {type(e).__name__}: {e}")
    requests = []
    for name, chunks in plans.items():
        partitions = chunk_partitions(name)
        have = set(context.instance.get_dynamic_partitions(partitions.name))
        new = [chunk_partition_key(c.index) for c in chunks if chunk_partition_key(c.index) not in have]
        if new:
            requests.append(AddDynamicPartitionsRequest(partitions.name, new))
    if not requests:
        return SkipReason(f"every table's chunks are partitions already ({len(names)} tables)")
    return SensorResult(dynamic_partitions_requests=requests)
