"""Vacuum: the files of a table that no version within the retention references, deleted, on
a local folder or an object store; then the log's expired entries.

delta-rs's ``vacuum`` in its *full* mode, with ``retention_hours`` passed explicitly: a file a
commit removed is deleted once its removal is older than the retention (a reader of any
version younger than that still finds every file of it: a file live at version v is removed,
if ever, by a later commit, so its removal is younger than v); a file no commit ever added (a
copy-on-write or compaction file whose commit never came, a crash's leftover) once the file
itself is older than the retention. The lite mode would miss the second kind, and removed
files whose record a checkpoint dropped (``delta.deletedFileRetentionDuration``, which binlake
keeps at least as long as the retention: cdc_core/config.py, layout.py). A vacuum lists the
table's folder (on an object store one LIST request per 1,000 files), deletes in batches
(one request per 1,000 files on S3), and commits twice (delta-rs's VACUUM START and END,
only when it deletes something); then a checkpoint is written at the table's version (a reader
then opens the table from it instead of replaying up to ``delta.checkpointInterval`` commits:
for a small table, most of a full read's time), and ``cleanup_metadata`` deletes log entries
older than ``delta.logRetentionDuration`` that the checkpoint makes unneeded.

A vacuum deletes files of other writers' uncommitted work as soon as they are older than the
retention: with a short retention (below Delta's 168 hours, accepted with a warning) it must
not run while another process writes the table; binlake runs it only in the pipeline's one
writer, between batches, never while that writer has a compaction of the table in flight.

Invariants (tests/test_maintenance.py): after a vacuum the table reads the same; a version
younger than the retention still reads; the bytes on disk are the live bytes plus the files
younger than the retention.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs

from pipelines.lake.storage import filesystem
from pipelines.lake.tables import MAINTENANCE_KEY, DeltaTable, metadata_properties

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


def vacuum(dt: DeltaTable, sink: str, uri: str, storage_options: dict[str, str] | None,
           retention_hours: int) -> VacuumResult:
    """Delete the files of ``dt`` no version younger than ``retention_hours`` references, then its
    expired log entries (see the module). ``dt``: the writer's handle (left at the latest version)."""
    started = time.monotonic()
    before = _stored(uri, storage_options)
    deleted = dt.vacuum(retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False,
                        full=True, commit_properties=metadata_properties({MAINTENANCE_KEY: '{"kind": "vacuum"}'}))
    # Paths relative to the table root. delta-rs also "deletes" removed files an earlier vacuum
    # deleted already (their records stay in the log until a checkpoint drops them): only the files
    # the listing found count.
    gone = [size for rel, size in before.items() if rel in {unquote(p) for p in deleted}]
    freed = sum(gone)
    # A checkpoint at the version now: a reader opening the table reads it instead of replaying
    # up to ``delta.checkpointInterval`` commits (most of a small table's read time), and the
    # cleanup may then drop every expired entry before it.
    dt.create_checkpoint()
    dt.cleanup_metadata()
    live = sum(_live_sizes(dt))
    stored = sum(before.values()) - freed
    return VacuumResult(sink, len(gone), freed, live, stored, retention_hours, time.monotonic() - started)
