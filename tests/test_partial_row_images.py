"""Row images that leave columns out: a session may set ``binlog_row_image`` to MINIMAL or
NOBLOB although the server's is FULL. An update then carries the key and the changed
columns only, a delete the key only. Before, the stream applied such images as whole rows
(an updated row came out with a NULL key and its other columns lost); now the event is not
decoded, its table is backfilled online, and a chunk window holding one is read again
(cdc_core/binlog/decoder.py: ``partial_image``; cdc_core/binlog/range_reads.py)."""

from __future__ import annotations

import pytest

from cdc_core.binlog.range_reads import PartialRowImage, read_changes
from cdc_core.offset.position import master_position
from cdc_core.source.connection import connection_settings
from pipelines.lake.control_store import ControlStore
from tests.helpers import assert_equal
from tests.test_stream import stream_until_now


@pytest.mark.parametrize("image", ["MINIMAL", "NOBLOB"])
def test_partial_images_make_their_table_be_backfilled(db, make_config, image):
    name, conn = db
    with conn.cursor() as cur:
        at = master_position(cur)
        cur.execute("CREATE TABLE s (id INT PRIMARY KEY, a INT, b VARCHAR(10), t TEXT)")
        cur.execute("CREATE TABLE other (id INT PRIMARY KEY, a INT)")
        cur.execute("INSERT INTO s VALUES (1, 1, 'x', 'text'), (2, 2, 'y', 'text'), (3, 3, 'z', 'text')")
        cur.execute("INSERT INTO other VALUES (1, 1)")
        cur.execute(f"SET SESSION binlog_row_image = '{image}'")
        cur.execute("UPDATE s SET a = 10 WHERE id = 1")
        cur.execute("DELETE FROM s WHERE id = 2")
        cur.execute("INSERT INTO s (id, a) VALUES (4, 4)")
        cur.execute("SET SESSION binlog_row_image = 'FULL'")
        cur.execute("UPDATE other SET a = 5")  # full images: streamed, not backfilled
        end = master_position(cur)
    cfg = make_config(name, source={"startup": {"mode": "specific", "file": at.file, "pos": at.pos}})
    stream_until_now(cfg)
    assert_equal(cfg, [f"{name}.s", f"{name}.other"])
    assert [(r.table, str(r.state)) for r in ControlStore.of(cfg).backfills()] == [(f"{name}.s", "done")]
    with pytest.raises(PartialRowImage, match=f"{name}.s"):
        list(read_changes(connection_settings(cfg), cfg.source.server_id + 9, at, end, {(name, "s")}))
