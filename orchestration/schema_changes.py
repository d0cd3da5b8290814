"""Sensor-triggered schema evolution: with ``stream.schema_changes: external`` the stream
engine records a column change as pending and holds the table; this sensor sees the
pending change in ``_binlake/schema_history`` and launches one run of
``apply_schema_changes`` per change, which applies it with the same function the engine
uses inline (``pipelines.schema_registry.apply_pending``). The engine releases the table
once the history shows the change resolved.
"""

from dagster import (
    AssetMaterialization,
    Config,
    DefaultSensorStatus,
    Failure,
    OpExecutionContext,
    RunConfig,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    job,
    op,
    sensor,
)

from resources.binlake import BinlakeConfigResource


class SchemaChangeConfig(Config):
    """Which pending change to apply: its table, DDL position and index in the statement."""

    table: str
    file: str
    pos: int
    index: int


@op
def apply_schema_change(context: OpExecutionContext, config: SchemaChangeConfig, binlake: BinlakeConfigResource):
    """Apply one pending schema change to its Delta table under schema_change_behavior."""
    from pipelines.control_store import ControlStore
    from pipelines.schema_applier import SchemaChangeRejected
    from pipelines.schema_registry import apply_pending, pending_changes

    cfg = binlake.load()
    store = ControlStore.of(cfg)
    key = (config.table, config.file, config.pos, config.index)
    found = [p for p in pending_changes(store) if p.key == key]
    if not found:
        context.log.info(f"{config.table}: the change at {config.file}:{config.pos} is already resolved")
        return
    pending = found[0]
    try:
        result = apply_pending(cfg, pending, store=store)
    except SchemaChangeRejected as e:
        raise Failure(description=str(e)) from None
    context.log.info(f"{pending.table}: {pending.description} → {result.action}")
    db, name = pending.table.split(".", 1)
    context.log_event(AssetMaterialization(asset_key=[db, name], description="schema change applied", metadata={
        "ddl": pending.ddl, "change": pending.description, "action": result.action,
        "position": str(pending.position), "rewritten": result.rewritten, "skipped": result.skipped}))


@job(description="Apply a pending schema change (launched by schema_change_sensor)")
def apply_schema_changes():
    apply_schema_change()


@sensor(job=apply_schema_changes, minimum_interval_seconds=5, default_status=DefaultSensorStatus.RUNNING,
        description="Launches apply_schema_changes for each schema change the stream holds a table for")
def schema_change_sensor(context: SensorEvaluationContext, binlake: BinlakeConfigResource):
    """One run request per pending change (the run key makes each change launch once)."""
    from pipelines.control_store import ControlStore
    from pipelines.schema_registry import pending_changes

    cfg = binlake.load()
    if cfg.stream.schema_changes != "external":
        return SkipReason("stream.schema_changes is inline: the stream applies schema changes itself")
    pending = pending_changes(ControlStore.of(cfg))
    if not pending:
        return SkipReason("no pending schema change")
    return [RunRequest(run_key=p.run_key, tags={"binlake/table": p.table}, run_config=RunConfig(ops={
        "apply_schema_change": SchemaChangeConfig(table=p.table, file=p.position.file, pos=p.position.pos,
                                                  index=p.index)})) for p in pending]
