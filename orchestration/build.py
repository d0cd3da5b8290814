"""``build_binlake_definitions``: binlake's Dagster definitions for one config, for people
who write their definitions in Python; the component (orchestration/component.py) and
the code location (orchestration/definitions.py) are built with it.

Loading never connects to MySQL: the tables come from the saved table catalog
(pipelines/source_catalog.py) and the lake's schema history. With neither, the location
loads with no table assets and the refresh job says how to discover them.

What it holds: one asset per captured table (snapshot chunks as partitions,
orchestration/snapshot.py), the stream job and its hand-off sensor
(orchestration/stream.py), the schema-change sensor and job (orchestration/schema_changes.py),
asset checks with their jobs and schedules (hourly checks, nightly reconciliation;
orchestration/checks.py), the job ``binlake_refresh_tables``, the online backfill and
repair jobs (orchestration/backfill.py), a schedule per ``dagster.backfills`` entry
(orchestration/scheduled_backfills.py), and the maintenance job and its schedule
(orchestration/maintenance.py).

Tests: tests/test_dagster_defs.py.
"""


import gc
import logging
from pathlib import Path

from dagster import Definitions, OpExecutionContext, in_process_executor, job, op

from cdc_core.config import load_config
from orchestration.backfill import backfill_job, repair_job
from orchestration.checks import all_checks, check_jobs
from orchestration.maintenance import maintenance_job, maintenance_schedule
from orchestration.scheduled_backfills import backfill_schedules
from orchestration.schema_changes import apply_schema_changes, schema_change_sensor
from orchestration.snapshot import snapshot_asset, snapshot_partitions_sensor
from orchestration.stream import stream_handoff_sensor, stream_job
from pipelines.source_catalog import SourceCatalog, current_tables
from resources.binlake import BinlakeResource, for_dagster, spark_resource
from resources.translator import BinlakeTranslator

log = logging.getLogger(__name__)


def default_catalog_path(path: str | Path) -> Path:
    """Where the Python API keeps a config's table catalog: ``.binlake/tables.json`` beside it."""
    return Path(path).resolve().parent / ".binlake" / f"{Path(path).stem}.tables.json"


@op(description="Discover the captured tables and their schemas from MySQL and save them as the table catalog")
def refresh_tables(context: OpExecutionContext, binlake: BinlakeResource) -> None:
    binlake.refresh_catalog(context)


@job(name="binlake_refresh_tables", description="Re-discover the captured tables (then reload the code location)")
def refresh_tables_job():
    refresh_tables()


def build_binlake_definitions(config: str | Path, catalog_path: str | Path | None = None,
                              translator: BinlakeTranslator | None = None) -> Definitions:
    """Definitions for the binlake config at ``config``, from the table catalog at
    ``catalog_path`` (default: ``default_catalog_path(config)``) and the lake, never the source.
    What the process holds on return is frozen for the garbage collector (``gc.freeze``)."""
    # Building allocates long-lived objects and next to no garbage (2,000 tables: some 250,000
    # objects), yet the cyclic collector would walk the growing heap again and again (~0.5 s): it is
    # paused meanwhile. The result is then frozen (gc.freeze: never walked again, still freed by
    # reference counting), so the repository and jobs Dagster builds from it next do not walk it
    # either (~0.4 s): the definitions live as long as the process that loads them (code server, run).
    if gc.get_freeze_count():
        # built before in this process (tests, a reload): what of that build is garbage by now is collected
        gc.unfreeze()
        gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        defs = _definitions(config, catalog_path, translator)
    finally:
        if enabled:
            gc.enable()
    gc.freeze()
    return defs


def _definitions(config: str | Path, catalog_path: str | Path | None,
                 translator: BinlakeTranslator | None) -> Definitions:
    cfg = for_dagster(load_config(config))
    catalog_path = Path(catalog_path) if catalog_path else default_catalog_path(config)
    catalog = SourceCatalog.read(catalog_path)
    if catalog is None:
        log.warning("binlake: no table catalog at %s yet: run the job binlake_refresh_tables "
                    "(or `dg utils refresh-defs-state`)", catalog_path)
    translator = translator or BinlakeTranslator(cfg)
    tables = current_tables(cfg, catalog)
    specs = [translator.get_asset_spec(t) for t in tables]
    changelogs = [spec for t in tables if (spec := translator.get_changelog_spec(t)) is not None]
    jobs, schedules = check_jobs([s.key for s in specs], cfg.dagster.reconcile_cron)
    return Definitions(
        assets=[*(snapshot_asset(s) for s in specs), *changelogs],
        asset_checks=all_checks([s.key for s in specs]),
        jobs=[stream_job, apply_schema_changes, refresh_tables_job, backfill_job, repair_job, maintenance_job, *jobs],
        sensors=[snapshot_partitions_sensor, stream_handoff_sensor, schema_change_sensor],
        schedules=[*schedules, *backfill_schedules(cfg), maintenance_schedule(cfg.dagster.maintenance_cron)],
        # One process per run: a step subprocess would start Python, Dagster and binlake again per
        # step, and a snapshot step already runs its chunks in parallel on Spark.
        executor=in_process_executor,
        resources={"binlake": BinlakeResource(config_path=str(Path(config).resolve()),
                                              catalog_path=str(catalog_path)),
                   "pyspark": spark_resource(cfg)},
    )

