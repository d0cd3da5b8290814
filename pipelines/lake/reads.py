"""Reading Delta tables' rows (never writing): row counts for ``binlake status``, the snapshot
summary, Dagster's materializations and checks; the rows of one routed source; a table as an
Arrow dataset (the online backfill's candidates, the row-by-row reconcile); SQL over a table
in DataFusion (the checksum reconcile).

A whole table's row count comes from the log's per-file counts when every file has one: no
data file is opened (:func:`count_rows`).

Invariants:
- A routed source's count and rows are those of its own rows in the route's sink
  (``_cdc_source``; :func:`source_filter`), also in files delta-rs's MERGE wrote
  (tests/test_routes.py: ``binlake status`` and the row-by-row comparison per shard).
- The rows of a ``soft_delete`` or ``history`` table that MySQL holds are its live rows and
  current versions (:func:`live_filter`, :func:`live_sql`): counts, the row-by-row comparison
  and the checksum reconcile read those (tests/test_history_stream.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, QueryBuilder

from cdc_core.schema.modes import CDC_DELETED, IS_CURRENT
from cdc_core.schema.output import CDC_SOURCE

if TYPE_CHECKING:  # pyarrow.dataset imports pandas: a second of a snapshot's start-up CPU
    import pyarrow.dataset as ds


def dataset(dt: DeltaTable) -> ds.Dataset:
    """The table's rows at ``dt``'s version as a pyarrow dataset (its files listed now, read later)."""
    return dt.to_pyarrow_dataset()


def source_filter(source: str) -> pc.Expression:
    """Dataset filter on the rows of routed source ``source`` in its sink table."""
    # Cast first: files written by delta-rs's MERGE store strings as string_view, and Arrow has
    # no equal kernel for (string, string_view), so a plain comparison fails on such files.
    return pc.field(CDC_SOURCE).cast(pa.string()) == source


def live_filter(names: list[str]) -> pc.Expression | None:
    """Dataset filter on the rows MySQL holds, of a table with columns ``names``: a history
    table's current versions, a soft_delete table's rows that are not tombstones; None for
    every row (cdc_core/schema/modes.py)."""
    # The boolean field itself: delta-rs's datasets drop every row for ``field == True`` (pyarrow 26).
    if IS_CURRENT in names:
        return pc.field(IS_CURRENT)
    if CDC_DELETED in names:
        return ~pc.field(CDC_DELETED)
    return None


def live_sql(names: list[str]) -> str | None:
    """:func:`live_filter` as a DataFusion condition (the checksum reconcile), or None."""
    if IS_CURRENT in names:
        return f'"{IS_CURRENT}"'
    if CDC_DELETED in names:
        return f'NOT "{CDC_DELETED}"'
    return None


def count_rows(dt: DeltaTable, source: str | None = None) -> int:
    """Rows of ``dt`` that MySQL holds (:func:`live_filter`); with ``source``, only that routed
    source's rows. A whole table's rows come from the log's per-file counts when every file has
    one: no data file is opened (on an object store, a request or more per file)."""
    live = live_filter(dt.schema().to_arrow().names)
    if live is None and source is None and "deletionVectors" not in (dt.protocol().reader_features or ()):
        counts = pa.table(dt.get_add_actions(flatten=True)).column("num_records")
        if counts.null_count == 0:
            return pc.sum(counts).as_py() or 0
    return dt.to_pyarrow_dataset().count_rows(filter=live if source is None else source_filter(source))


def query(dt: DeltaTable, sql: str, name: str = "t") -> Iterator[pa.RecordBatch]:
    """``sql`` over the table at ``dt``'s version, registered as ``name``, in DataFusion
    (delta-rs's ``QueryBuilder``): its record batches as they are computed."""
    reader = QueryBuilder().register(name, dt).execute(sql)
    return (pa.record_batch(batch) for batch in reader)
