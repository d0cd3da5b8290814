"""The change feed: an append-only changelog table beside a Delta table (``sink.change_feed``),
``<sink.path>/<db>/<table>__changes``, holding every change the stream applied to the table:
the source columns (an insert's and an update's after image, a delete's before image), then
``_cdc_op`` (c/u/d), ``_cdc_seq``, ``_cdc_ts`` and ``_cdc_position`` (docs/history.md).

Why a table and not Delta's Change Data Feed: binlake's copy-on-write commits are made with
delta-rs's ``create_write_transaction``, which takes add and remove actions only, so they
cannot carry ``_change_data`` files; a CDF reader would take every row of each rewritten file
as deleted and inserted. An appended table is read by any Delta reader, and "changes since"
is a filter on ``_cdc_seq`` (binlog order) or ``_cdc_ts``, or a read of the versions after N.

Invariants (tests/test_history_modes.py, tests/test_history_stream.py):
- Exactly once: a batch's changes are appended before the table's own commit, in a commit
  carrying the batch's offset (the stream's transaction identifier); rows at or before the
  changelog's own committed position are left out. The changelog is so always at or ahead
  of its table, and a restart, which reads again from the table's position, appends nothing
  twice.
- Source columns follow the table's by name: a column the source gained is added (earlier
  rows NULL); a value the changelog's older type cannot hold is NULL (pipelines/lake/conform.py).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.schema.output import CDC_SEQ, delta_name
from pipelines.lake.conform import conform
from pipelines.lake.files import writer_properties
from pipelines.lake.offsets import applied_position_key, stream_commit_properties
from pipelines.lake.tables import delta_schema, post_commit_hooks


def append_changes(dt: DeltaTable, rows: pa.Table, pipeline: str, offset: StreamOffset, source: str = "") -> int:
    """Append the changes of ``rows`` (the changelog layout, source columns as the stream
    decoded them) that ``dt`` does not hold yet, with ``offset``; how many were appended."""
    done = applied_position_key(dt, pipeline)
    if done is not None:  # a position key is seq >> 12 (cdc_core/offset/position.py)
        rows = rows.filter(pc.greater(pc.shift_right(rows.column(CDC_SEQ), 12), (done[0] << 32) | done[1]))
    if not rows.num_rows:
        return 0
    target = delta_schema(dt)
    for f in rows.schema:
        if delta_name(target.names, f.name) is None:
            target = target.append(f.with_nullable(True))
    data = conform(rows, target, source)
    write_deltalake(dt, data, mode="append", schema_mode="merge", writer_properties=writer_properties(data.schema),
                    commit_properties=stream_commit_properties(pipeline, offset),
                    post_commithook_properties=post_commit_hooks(dt))
    return rows.num_rows
