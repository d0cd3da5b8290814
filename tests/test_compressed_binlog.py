"""MariaDB's ``log_bin_compress``: row events past a size are written compressed, which
python-mysql-replication does not decode. Before, the reader skipped them as events it did
not know, and their rows were lost without a word (50 inserts of 1 kB rows: Delta held 0
of MySQL's 50 rows). Now ``validate`` refuses the setting and a reader that meets such an
event stops, naming it (cdc_core/binlog/decoder.py: COMPRESSED_EVENTS)."""

from __future__ import annotations

import pytest

from cdc_core.binlog.decoder import CompressedBinlog, read_changes
from cdc_core.offset.position import master_position
from cdc_core.source.connection import connection_settings
from cdc_core.source.validate import check
from pipelines.stream.engine import StreamFailed
from tests.test_stream import stream_until_now


def test_compressed_events_are_refused_never_skipped(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        at = master_position(cur)
        cur.execute("CREATE TABLE s (id INT PRIMARY KEY, v VARCHAR(2000))")
        cur.execute("SET GLOBAL log_bin_compress = ON")
        try:
            cfg = make_config(name, source={"startup": {"mode": "specific", "file": at.file, "pos": at.pos}})
            assert any("log_bin_compress is ON" in p for p in check(cfg))
            cur.execute("INSERT INTO s SELECT seq, REPEAT('x', 1000) FROM seq_1_to_50")
        finally:
            cur.execute("SET GLOBAL log_bin_compress = OFF")
        end = master_position(cur)
    assert not any("log_bin_compress" in p for p in check(cfg))
    with pytest.raises(StreamFailed, match="compressed .*log_bin_compress"):
        stream_until_now(cfg)
    with pytest.raises(CompressedBinlog):
        list(read_changes(connection_settings(cfg), cfg.source.server_id + 9, at, end, {(name, "s")}))
