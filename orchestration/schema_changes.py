"""Sensor-triggered schema evolution. Under Dagster the stream records a column change as
pending and holds its table (``stream.schema_changes: external``, the default here);
``schema_change_sensor`` sees the pending change in ``_binlake/schema_history`` and
launches one run of ``apply_schema_changes`` per change (its run key is the change), which
applies it with the function the engine uses inline (``pipelines.schema.registry.apply_pending``)
and materialises the table's asset with the DDL, the source schema before and after, what
``schema_change_behavior`` decided, and the Delta table's new column schema. The stream
releases the table once the history shows the change resolved.

Under ``exception`` the run fails quoting the statement; the table stays held. Re-executing
the run after changing the behaviour applies the change.

Tests: tests/test_dagster_sensors.py, tests/test_dagster_e2e.py, tests/test_schema_registry.py.
"""


from dagster import (
    AssetMaterialization,
    Config,
    DefaultSensorStatus,
    Failure,
    MetadataValue,
    OpExecutionContext,
    RunConfig,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    TableColumn,
    TableSchema,
    job,
    op,
    sensor,
)

from cdc_core.schema.table import TableSchema as SourceSchema
from resources.binlake import BinlakeResource
from resources.translator import asset_key, column_schema


class SchemaChangeConfig(Config):
    """Which pending change to apply: its table, DDL position and index in the statement."""

    table: str
    file: str
    pos: int
    index: int


def source_columns(s: SourceSchema | None) -> TableSchema | None:
    """A recorded source schema (``cdc_core.schema.table.TableSchema`` or None) as a Dagster
    column schema (MySQL column types)."""
    if s is None:
        return None
    return TableSchema(columns=[TableColumn(c.name, c.column_type) for c in s.columns])


@op
def apply_schema_change(context: OpExecutionContext, config: SchemaChangeConfig, binlake: BinlakeResource):
    """Apply one pending schema change to its Delta table under schema_change_behavior."""
    from cdc_core.schema.history import Status
    from pipelines.lake.control_store import ControlStore
    from pipelines.schema.applier import SchemaChangeRejected
    from pipelines.schema.registry import PendingChange, apply_pending
    from pipelines.source_catalog import lake_columns

    cfg = binlake.load()
    store = ControlStore.of(cfg)
    key = (config.table, config.file, config.pos, config.index)
    history = store.schema_history()
    mine = [r for r in history if r.key == key]
    recorded = [r for r in mine if r.status == Status.PENDING]
    if not recorded:
        raise Failure(description=f"no schema change of {config.table} at {config.file}:{config.pos} is recorded")
    resolved = [r for r in mine if r.status in (Status.APPLIED, Status.SKIPPED)]
    if resolved:
        context.log.info(f"{config.table}: the change at {config.file}:{config.pos} is already "
                         f"{resolved[-1].status}")
        return
    pending = PendingChange.from_entry(recorded[0])
    before = [r for r in history if r.table == pending.table and r.status in (Status.BASELINE, Status.APPLIED)
              and r.schema is not None and r.position < pending.position]
    metadata = {
        "binlake/ddl": MetadataValue.md(f"```sql\n{pending.ddl}\n```"),
        "binlake/change": pending.description,
        "binlake/binlog_position": str(pending.position),
        "binlake/behavior": cfg.pipeline.schema_change_behavior,
        "binlake/source_schema_before": source_columns(before[-1].schema) if before else None,
        "binlake/source_schema_after": source_columns(pending.schema),
    }
    try:
        result = apply_pending(cfg, pending, store=store)
    except SchemaChangeRejected as e:
        raise Failure(description=str(e), metadata={**{k: v for k, v in metadata.items() if v is not None},
                                                    "binlake/decision": "rejected: the table stays held"}) from None
    context.log.info(f"{pending.table}: {pending.description} → {result.action}")
    after = pending.schema
    metadata.update({"binlake/decision": result.action, "binlake/rewritten": result.rewritten,
                     "binlake/skipped": result.skipped})
    if after is not None:
        metadata["dagster/column_schema"] = column_schema(lake_columns(cfg, after))
    context.log_event(AssetMaterialization(asset_key=asset_key(pending.table),
                                           description=f"schema change: {pending.description}",
                                           metadata={k: v for k, v in metadata.items() if v is not None}))


@job(description="Apply a pending schema change (launched by schema_change_sensor)")
def apply_schema_changes():
    apply_schema_change()


@sensor(job=apply_schema_changes, minimum_interval_seconds=5, default_status=DefaultSensorStatus.RUNNING,
        description="Launches apply_schema_changes for each schema change the stream holds a table for")
def schema_change_sensor(context: SensorEvaluationContext, binlake: BinlakeResource):
    """One run request per pending change (the run key makes each change launch once)."""
    from pipelines.lake.control_store import ControlStore
    from pipelines.schema.registry import pending_changes

    cfg = binlake.load()
    if cfg.stream.schema_changes != "external":
        return SkipReason("stream.schema_changes is inline: the stream applies schema changes itself")
    pending = pending_changes(ControlStore.of(cfg))
    if not pending:
        return SkipReason("no pending schema change")
    return [RunRequest(run_key=p.run_key, tags={"binlake/table": p.table}, run_config=RunConfig(ops={
        "apply_schema_change": SchemaChangeConfig(table=p.table, file=p.position.file, pos=p.position.pos,
                                                  index=p.index)})) for p in pending]
