"""Named pause points: a ``binlake`` process that waits at an exact step to be SIGKILLed there
(tests/test_soak.py, tests/test_backfill.py, tests/test_many_tables.py). The product holds no
test hook: each point is the start or the end of a product function, wrapped here before the CLI runs.

    python tests/pause_points.py <point>[:<n>] <binlake arguments>

runs ``binlake <arguments>`` and, the n-th time (default: the first) it reaches ``<point>``,
writes the line ``binlake-paused-at <point> <n>`` to stderr, then sleeps until it is killed.
The points, each a step where a crash leaves the lake half-way:

- ``batch_read``: stream, a micro-batch is read and none of its tables is committed yet
  (the start of ``Committer.apply`` with a batch holding rows);
- ``baselines_recorded``: stream, the schema-history baselines of the tables a batch met first
  (by their first table map) are recorded in one commit, their Delta tables not opened or created
  yet (the start of ``Sinks.open_all`` with a table not open; n counts such calls);
- ``table_commit``: stream, one table's commit of a micro-batch is about to start while the
  batch's other tables commit in parallel threads (the start of ``Committer._commit``; n counts
  table commits);
- ``tables_committed``: stream, every table of a batch is committed (with its offset), the
  pipeline checkpoint past the batch is not written yet (the end of ``Committer.apply``
  with commits made);
- ``schema_applied``: a DDL's change is committed to its Delta table, its schema history
  record (and the stream's checkpoint past the statement) not written yet (the end of
  ``apply_schema_change`` as ``apply_pending`` calls it, the change not skipped);
- ``backfill_group_read``: stream, a large backfill's read group (several chunks read on
  Spark or in a reader thread) is back, none of its chunks merged yet (the end of
  ``Backfills._collect`` with the group's rows there);
- ``backfill_read_ahead``: stream, a large backfill's group is read and the next group's
  read has started (the end of ``Backfills.start`` of a read-ahead group now in flight);
- ``backfill_merged``: stream, a backfill merge commit (a run of one or more chunks of a
  read group) is made in Delta (or its chunks found equal to MySQL, nothing to write), the
  request's progress not saved yet (the end of ``Backfills._write_merge``; n counts merge commits);
- ``compaction_rewritten``: stream, a compaction's new files are written, not committed (the
  end of ``compaction.rewrite``, in the stream's maintenance thread);
- ``compaction_committed``: stream, a compaction is committed, its run not recorded in
  ``_binlake/maintenance_runs`` (the end of ``compaction.commit`` with a commit made);
- ``vacuum_deleted``: stream, a vacuum deleted its files, its checkpoint, the log's cleanup and
  its run's record not done (the end of ``vacuum.delete`` with files deleted, in the stream's
  vacuum thread);
- ``snapshot_chunk_committed``: snapshot, a chunk group's rows are committed with their chunk
  records, the records' mirror in ``_binlake/`` not written yet (the end of
  ``SnapshotJob._commit``).
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

MARKER = "binlake-paused-at"


def command(point: str) -> list[str]:
    """The command line that runs ``binlake`` paused at ``point`` (``<point>[:<n>]``); the
    binlake arguments follow it."""
    return [sys.executable, str(Path(__file__).resolve()), point]


class _Pause:
    """Waits for good at the n-th hit of one point."""

    def __init__(self, point: str, n: int):
        self.point, self.n = point, n
        self.hits = 0
        self.lock = threading.Lock()

    def hit(self) -> None:
        with self.lock:
            self.hits += 1
            if self.hits != self.n:
                return
        sys.stderr.write(f"{MARKER} {self.point} {self.n}\n")
        sys.stderr.flush()
        while True:
            time.sleep(3600)


def _before(owner, name: str, pause: _Pause, when: Callable[..., bool]) -> None:
    """Pause at the start of ``owner.name`` when ``when(*args)``."""
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if when(*args, **kwargs):
            pause.hit()
        return fn(*args, **kwargs)
    setattr(owner, name, wrapper)


def _after(owner, name: str, pause: _Pause, when: Callable[..., bool]) -> None:
    """Pause at the end of ``owner.name`` when ``when(result, *args)``."""
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        if when(result, *args, **kwargs):
            pause.hit()
        return result
    setattr(owner, name, wrapper)


def install(point: str, n: int) -> None:
    """Wrap the product function whose start or end is ``point``."""
    from pipelines.lake.maintenance import compaction, vacuum
    from pipelines.schema import registry
    from pipelines.snapshot.driver import SnapshotJob
    from pipelines.stream.commit import Committer
    from pipelines.stream.online_backfill import Backfills
    from pipelines.stream.sinks import Sinks

    pause = _Pause(point, n)
    points = {
        "batch_read": lambda: _before(Committer, "apply", pause, lambda _self, batch, _offset: bool(batch.tables)),
        "baselines_recorded": lambda: _before(Sinks, "open_all", pause, lambda self, sources, _members: any(
            self.router.sink(n) not in self.tables for n in sources)),
        "table_commit": lambda: _before(Committer, "_commit", pause, lambda *_: True),
        "tables_committed": lambda: _after(Committer, "apply", pause, lambda commits, *_: bool(commits)),
        "schema_applied": lambda: _after(registry, "apply_schema_change", pause,
                                         lambda result, *_, **__: not result.skipped),
        "backfill_group_read": lambda: _after(Backfills, "_collect", pause,
                                              lambda _r, _self, f: f.results is not None),
        "backfill_read_ahead": lambda: _after(Backfills, "start", pause, lambda _r, self, group: group.ahead and any(
            f.request.id == group.request.id and f.chunks[0].index == group.first for f in self.inflight)),
        "backfill_merged": lambda: _after(Backfills, "_write_merge", pause, lambda *_: True),
        "snapshot_chunk_committed": lambda: _after(SnapshotJob, "_commit", pause, lambda *_: True),
        "compaction_rewritten": lambda: _after(compaction, "rewrite", pause, lambda done, *_: bool(done.written)),
        "compaction_committed": lambda: _after(compaction, "commit", pause, lambda result, *_: result is not None),
        "vacuum_deleted": lambda: _after(vacuum, "delete", pause, lambda deleted, *_: bool(deleted)),
    }
    if point not in points:
        raise SystemExit(f"unknown pause point {point!r}: one of {', '.join(points)}")
    points[point]()


def main() -> None:
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # the checkout these tests are in, not tests/
    point, _, n = sys.argv[1].partition(":")
    install(point, int(n or 1))
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    from pipelines import cli

    cli.run()


if __name__ == "__main__":
    main()
