"""Named pause points: a test hook to SIGKILL the process at an exact step (tests/test_soak.py).

``BINLAKE_TEST_PAUSE_AT=<point>[:<n>]`` makes the process write the line
``binlake-paused-at <point> <n>`` to stderr the n-th time (default: the first) it reaches
``<point>``, then sleep until it is killed. Unset — always, outside tests — ``pause_at`` does
nothing. The points, each a step where a crash leaves the lake half-way:

- ``batch_read``: stream, a micro-batch is read and none of its tables is committed yet;
- ``tables_committed``: stream, every table of a batch is committed (with its offset), the
  pipeline checkpoint past the batch is not written yet;
- ``schema_applied``: a DDL's change is committed to its Delta table, its schema history
  record (and the stream's checkpoint past the statement) not written yet;
- ``backfill_group_read``: stream, a large backfill's read group (several chunks read on
  Spark or in a reader thread) is back, none of its chunks merged yet;
- ``backfill_merged``: stream, a backfill chunk is merged into Delta (or found equal to
  MySQL, nothing to write), the request's progress not saved yet;
- ``snapshot_chunk_committed``: snapshot, a chunk group's rows are committed with their chunk
  records, the records' mirror in ``_binlake/`` not written yet.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter

PAUSE_ENV = "BINLAKE_TEST_PAUSE_AT"
MARKER = "binlake-paused-at"

_hits: Counter = Counter()
_lock = threading.Lock()


def pause_at(point: str) -> None:
    """Pause here for good if ``BINLAKE_TEST_PAUSE_AT`` names ``point`` and this is its n-th hit."""
    target = os.environ.get(PAUSE_ENV)
    if not target or target.partition(":")[0] != point:
        return
    n = int(target.partition(":")[2] or 1)
    with _lock:
        _hits[point] += 1
        if _hits[point] != n:
            return
    sys.stderr.write(f"{MARKER} {point} {n}\n")
    sys.stderr.flush()
    while True:
        time.sleep(3600)
