"""When a table is compacted and vacuumed: the one place that decides (the doing is in
compaction.py and vacuum.py).

A table's files as its log lists them (:class:`TableFiles`) are judged against the
*effective target* size (:func:`effective_target`): ``sink.maintenance.target_file_mb``,
capped at the table's live bytes divided by ``SMALL_TABLE_FILES`` but never below
``MIN_TARGET_BYTES``. The cap exists for copy-on-write (pipelines/lake/apply.py): a batch
rewrites every file holding one of its keys, so a 100 MB table compacted into one 100 MB
file would have that file rewritten by every batch that touches any key; cut into files of
an eighth of the table in key order, a batch rewrites only the files of the key ranges it
touches (bench/maintenance.py, ``--only layout``: a one-key batch's time grows with the file
it rewrites, a full read's with the number of files; eight files cost a full read little).

A file is *small* below ``SMALL_FRACTION`` of the effective target, *oversized* above
``OVERSIZED_FACTOR`` times it. Each micro-batch that inserts keys adds one small file per
table (copy-on-write rewrites other files in place, keeping their size), so small files
grow with uptime and nothing else does. A table is compacted (:func:`compaction_due`):

- when its small files reach ``SMALL_FILES_TRIGGER`` (16: a batch reads only the files
  whose key range holds one of its keys, so a few more files cost the stream little, and a
  compaction every 16 batches or more is cheap next to the batches' own writes), or their
  bytes fill a whole target file;
- when it has been idle (no commit) for ``IDLE_SECONDS`` with at least two small files or
  an oversized one: an idle table ends up compacted, whatever its rate;
- at every maintenance interval (``sink.maintenance.interval_minutes``) with at least two
  small files or an oversized one;
- when asked (``binlake maintain``, the Dagster maintenance job): likewise.

A table is vacuumed at every maintenance interval and when asked, never while one of its
compactions is in flight (its new files are not committed yet).

Invariants (tests/test_maintenance.py): a table whose small files pass the trigger is
compacted; one below it is left alone unless idle, due or asked; an effective target is
never above ``target_file_mb`` nor below ``MIN_TARGET_BYTES``.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_TARGET_BYTES = 1 << 20  # below this a file's fixed costs (a request, a footer) dominate its rows
SMALL_TABLE_FILES = 8  # a table is cut into at least this many files before files reach the target
SMALL_FRACTION = 0.5
OVERSIZED_FACTOR = 2.0
SMALL_FILES_TRIGGER = 16
IDLE_SECONDS = 60.0


@dataclass(frozen=True)
class DataFile:
    """One live data file of a table, as its log lists it."""

    path: str  # relative to the table root, as the add action names it
    size: int
    rows: int | None
    partition: tuple[tuple[str, str | None], ...] = ()  # partition values, sorted by column


@dataclass(frozen=True)
class TableFiles:
    """A table's live files at one version."""

    version: int
    files: tuple[DataFile, ...]

    @property
    def live_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def small(self, target: int) -> list[DataFile]:
        """Files below ``SMALL_FRACTION`` of ``target``."""
        return [f for f in self.files if f.size < SMALL_FRACTION * target]

    def oversized(self, target: int) -> list[DataFile]:
        """Files above ``OVERSIZED_FACTOR`` times ``target``."""
        return [f for f in self.files if f.size > OVERSIZED_FACTOR * target]


def effective_target(target_file_mb: float, live_bytes: int) -> int:
    """The file size compaction aims at for a table of ``live_bytes``: ``target_file_mb``, capped
    at ``live_bytes / SMALL_TABLE_FILES``, never below ``MIN_TARGET_BYTES`` (see the module)."""
    target = int(target_file_mb * (1 << 20))
    return max(min(target, live_bytes // SMALL_TABLE_FILES), min(MIN_TARGET_BYTES, target))


@dataclass(frozen=True)
class Trigger:
    """Why a compaction is due now (its ``reason`` is recorded with what it did)."""

    reason: str
    inputs: tuple[DataFile, ...]  # the files to rewrite: the small ones and the oversized ones


def compaction_due(files: TableFiles, target_file_mb: float, *, idle_seconds: float, interval_due: bool,
                   asked: bool) -> Trigger | None:
    """Whether the table whose live files are ``files`` is compacted now, and which files (see the
    module): ``idle_seconds`` since its last commit, ``interval_due`` at a maintenance interval,
    ``asked`` by ``binlake maintain``."""
    target = effective_target(target_file_mb, files.live_bytes)
    small, oversized = files.small(target), files.oversized(target)
    inputs = tuple(small + oversized)
    by_count = len(small) >= SMALL_FILES_TRIGGER
    by_bytes = len(small) >= 2 and sum(f.size for f in small) >= target
    if by_count or by_bytes:
        return Trigger(f"{len(small)} small files" if by_count else "small files fill a target file", inputs)
    if len(small) < 2 and not oversized:
        return None
    if asked:
        return Trigger("asked", inputs)
    if interval_due:
        return Trigger("maintenance interval", inputs)
    if idle_seconds >= IDLE_SECONDS:
        return Trigger("idle", inputs)
    return None
