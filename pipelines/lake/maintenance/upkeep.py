"""A table's upkeep as ``binlake status`` and Dagster show it: its live files and bytes, how
many of its files are small (policy.py), the bytes awaiting vacuum (one listing of its
folder), and its last compaction and vacuum with what they did (``_binlake/maintenance_runs``).

Invariant (tests/test_maintenance_stream.py, tests/test_dagster_stream.py): the figures are
those of the table's latest version and of the last runs recorded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from cdc_core.config import BinlakeConfig
from pipelines.lake.maintenance.compaction import table_files
from pipelines.lake.maintenance.policy import effective_target
from pipelines.lake.maintenance.vacuum import usage
from pipelines.lake.tables import DeltaTable, table_uri


@dataclass(frozen=True)
class LastRun:
    """A table's last compaction or vacuum: when, why, and what it did."""

    at: str  # ISO 8601, UTC
    reason: str
    did: str
    seconds: float | None


@dataclass(frozen=True)
class Upkeep:
    """A Delta table's files and bytes now, and its last maintenance."""

    live_files: int
    small_files: int
    live_bytes: int
    bytes_awaiting_vacuum: int
    last_compaction: LastRun | None
    last_vacuum: LastRun | None

    def to_json(self) -> dict:
        return asdict(self)


def last_run(r: dict | None) -> LastRun | None:
    """A ``maintenance_runs`` row (ControlStore.latest_maintenance) as a :class:`LastRun`."""
    if r is None:
        return None
    if r["kind"] == "compaction":
        did = (f"{r['files_removed']} files ({r['bytes_removed']:,} bytes) into {r['files_added']} "
               f"({r['bytes_added']:,} bytes), {r['files_before']} → {r['files_after']} live files")
    else:
        did = f"{r['files_deleted']} files ({r['bytes_deleted']:,} bytes) deleted"
    return LastRun(r["at"].isoformat(), r["reason"] or "", did, r["seconds"])


def upkeep(cfg: BinlakeConfig, sink: str, dt: DeltaTable, runs: dict[tuple[str, str], dict]) -> Upkeep:
    """The upkeep of the Delta table ``sink`` (``dt``: its handle; ``runs``:
    ``ControlStore.latest_maintenance()``)."""
    u = usage(dt, table_uri(cfg.sink.path, sink), cfg.sink.storage_options)
    files = table_files(dt)
    small = len(files.small(effective_target(cfg.sink.maintenance.target_file_mb, files.live_bytes)))
    return Upkeep(u.live_files, small, u.live_bytes, u.awaiting_vacuum, last_run(runs.get((sink, "compaction"))),
                  last_run(runs.get((sink, "vacuum"))))
