"""Vacuum: the files of a table that no version within the retention references, deleted, on
a local folder or an object store; then the log's expired entries. In two steps, so that the
deletes run off the writer's thread:

1. :func:`plan` (the writer's thread, between its batches): which files go — delta-rs's
   ``vacuum`` in its *full* mode as a dry run, ``retention_hours`` passed explicitly: a file a
   commit removed once its removal is older than the retention (a reader of any version younger
   than that still finds every file of it: a file live at version v is removed, if ever, by a
   later commit, so its removal is younger than v); a file no commit ever added (a
   copy-on-write or compaction file whose commit never came, a crash's leftover) once the file
   itself is older than the retention. The lite mode would miss the second kind, and removed
   files whose record a checkpoint dropped (``delta.deletedFileRetentionDuration``, which
   binlake keeps at least as long as the retention: cdc_core/config.py, layout.py). One
   listing of the table's folder (on an object store one LIST request per 1,000 files).
2. :func:`sweep` (any thread; the stream's is its maintenance's vacuum thread): delete those
   files (one request per file), then write a checkpoint at the table's latest version from
   the sweep's own handle (a reader then opens the table from it instead of replaying up to
   ``delta.checkpointInterval`` commits: for a small table, most of a full read's time), and
   ``cleanup_metadata`` deletes log entries older than ``delta.logRetentionDuration`` that the
   checkpoint makes unneeded. Nothing is committed here.
3. :func:`record` (the writer's thread again, once the sweep is done): a data table's vacuum
   that deleted files leaves one commit without files in its log, ``binlake.maintenance``
   kind ``vacuum`` with what it deleted (where delta-rs's own vacuum leaves VACUUM START and
   END commits), so a reader of the table's history sees it; ``_binlake/maintenance_runs``
   records every vacuum, the control tables' too.

Why the deletes may run while the writer goes on committing: the files planned are, at the
planned version v, neither live nor uncommitted work of the writer (it plans between its
batches, never while it has a compaction of the table in flight), and no later commit adds
them again (every write, copy-on-write or compaction, adds files of new names). A file
committed after v was written after the plan's listing, so it is not among them. A kill
mid-sweep leaves the rest, and the next vacuum's dry run finds them again.

A vacuum deletes files of other writers' uncommitted work as soon as they are older than the
retention: with a short retention (below Delta's 168 hours, accepted with a warning) it must
not run while another process writes the table; binlake plans it only in the pipeline's one
writer, between batches, never while that writer has a compaction of the table in flight.

Invariants (tests/test_maintenance.py): after a vacuum the table reads the same; a version
younger than the retention still reads; the bytes on disk are the live bytes plus the files
younger than the retention; files written after the plan are never deleted by its sweep
(tests/test_maintenance_stream.py: a batch commits while a sweep deletes, Delta = MySQL).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs

from pipelines.lake.storage import delete_files, filesystem
from pipelines.lake.tables import MAINTENANCE_KEY, DeltaTable, commit_no_data, metadata_properties, open_table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Usage:
    """A table's data files: live (its latest version's) and on storage (everything under its
    folder but the log: the live files, the removed ones and any never committed)."""

    live_files: int
    live_bytes: int
    stored_files: int
    stored_bytes: int

    @property
    def awaiting_vacuum(self) -> int:
        """Bytes on storage no longer live (deleted by a vacuum once older than the retention)."""
        return max(0, self.stored_bytes - self.live_bytes)


def _stored(uri: str, storage_options: dict[str, str] | None) -> dict[str, int]:
    """Path (relative to the table root) -> size of every data file under the table's folder,
    its log and other hidden folders left out (one listing)."""
    fs, prefix = filesystem(uri, storage_options)
    base = prefix.rstrip("/")
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    out = {}
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        rel = info.path[len(base):].lstrip("/") if base else info.path.lstrip("/")
        if any(part.startswith(("_", ".")) for part in rel.split("/")):
            continue  # _delta_log, _change_data, .crc files: not data files a vacuum deletes
        out[rel] = info.size
    return out


def usage(dt: DeltaTable, uri: str, storage_options: dict[str, str] | None) -> Usage:
    """Live and stored data files of the table at ``uri`` (``dt``: its handle; one listing)."""
    sizes = _live_sizes(dt)
    stored = _stored(uri, storage_options)
    return Usage(len(sizes), sum(sizes), len(stored), sum(stored.values()))


def _live_sizes(dt: DeltaTable) -> list[int]:
    return pa.table(dt.get_add_actions(flatten=False)).column("size_bytes").to_pylist()


@dataclass(frozen=True)
class VacuumPlan:
    """The files one vacuum deletes, decided at ``version`` of the table at ``uri`` (paths relative
    to the table root, percent-decoded)."""

    sink: str
    uri: str
    storage_options: dict[str, str]
    retention_hours: int
    version: int
    deletable: tuple[str, ...]
    started: float  # time.monotonic() when planned


@dataclass(frozen=True)
class VacuumResult:
    """What one vacuum did (recorded in ``_binlake/maintenance_runs``)."""

    sink: str
    files_deleted: int
    bytes_deleted: int
    live_bytes: int
    stored_bytes: int  # after it
    retention_hours: int
    seconds: float

    def describe(self) -> str:
        return (f"{self.sink}: {self.files_deleted} files ({self.bytes_deleted:,} bytes) deleted; "
                f"{self.stored_bytes:,} bytes stored for {self.live_bytes:,} live")


# Files deleted between two looks at ``stop``: a stream stopping waits for one such slice at most.
DELETE_SLICE = 200


def plan(dt: DeltaTable, sink: str, uri: str, storage_options: dict[str, str] | None,
         retention_hours: int) -> VacuumPlan:
    """The files of ``dt`` (the writer's handle, at its latest version, no write of it in flight)
    that no version younger than ``retention_hours`` references (see the module); deletes nothing."""
    started = time.monotonic()
    paths = dt.vacuum(retention_hours=retention_hours, dry_run=True, enforce_retention_duration=False, full=True)
    return VacuumPlan(sink, uri, dict(storage_options or {}), retention_hours, dt.version(),
                      tuple(sorted({unquote(p) for p in paths})), started)


def sweep(planned: VacuumPlan, stop: threading.Event | None = None) -> VacuumResult:
    """Delete ``planned``'s files, then checkpoint the table and drop its expired log entries from
    a handle of its own (see the module). Runs in any thread: it touches no caller's handle. With
    ``stop`` set it returns after the slice of deletes under way (the rest goes with the next vacuum)."""
    before = _stored(planned.uri, planned.storage_options)
    # delta-rs also lists removed files an earlier vacuum deleted already (their records stay in
    # the log until a checkpoint drops them): only the files the listing found count.
    found = [rel for rel in planned.deletable if rel in before]
    gone = delete(planned, found, stop)
    freed = sum(before[rel] for rel in gone)
    dt = open_table(planned.uri, planned.storage_options)
    live = 0
    if dt is not None:
        if len(gone) == len(found):
            # A checkpoint at the version now: a reader opening the table reads it instead of
            # replaying up to ``delta.checkpointInterval`` commits (most of a small table's read
            # time), and the cleanup may then drop every expired entry before it.
            dt.create_checkpoint()
            dt.cleanup_metadata()
        live = sum(_live_sizes(dt))
    return VacuumResult(planned.sink, len(gone), freed, live, sum(before.values()) - freed, planned.retention_hours,
                        time.monotonic() - planned.started)


def record(dt: DeltaTable, done: VacuumResult) -> None:
    """The vacuum's commit in ``dt``'s log, without files or stream offset (see the module), if it
    deleted files. ``dt``: the writer's handle, between its batches."""
    if done.files_deleted:
        what = {"kind": "vacuum", "files_deleted": done.files_deleted, "bytes_deleted": done.bytes_deleted}
        commit_no_data(dt, metadata_properties({MAINTENANCE_KEY: json.dumps(what)}))


def delete(planned: VacuumPlan, paths: list[str], stop: threading.Event | None = None) -> list[str]:
    """Delete ``paths`` (of ``planned``'s table) a slice at a time until done or ``stop`` is set;
    the ones deleted."""
    done: list[str] = []
    for start in range(0, len(paths), DELETE_SLICE):
        if stop is not None and stop.is_set():
            break
        piece = paths[start:start + DELETE_SLICE]
        delete_files(planned.uri, piece, planned.storage_options)
        done += piece
    return done

