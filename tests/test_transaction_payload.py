"""MySQL's compressed transactions (TRANSACTION_PAYLOAD_EVENT, cdc_core/binlog/payload.py) streamed end to end.

No MySQL server runs here, so the payloads are made from the real MariaDB server's own transactions: the
stream's reader reads the server's binlog through tests/binlog_bytes.py's CompressingSource, which yields each
transaction (its table maps, row events and XID, as the server wrote them) as one zstd-compressed
TRANSACTION_PAYLOAD_EVENT ending where the XID ends, as MySQL writes a compressed transaction. The reader
process's opener is wrapped from outside (the seam cdc_core/binlog/reader.py opens its source with), nothing in
the product changes. Checked: Delta equals MariaDB row by row after the stream and after a restart from its
checkpoint (a keyless table too, where a repeated change would show as a copy); every transaction was read as a
payload; the rows of one payload carry distinct ``_cdc_seq`` values in statement order.

On constructed payloads (the corpus's recorded inner events, re-wrapped): what binlake refuses, naming the
payload's position and why, in every reader: a compression type other than zstd or none, a size over the bound,
data that does not decompress to the size the header states; a payload stored uncompressed is read.
"""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

import cdc_core.binlog.reader as binlog_reader
from cdc_core.binlog import payload
from cdc_core.binlog.decoder import RowDecoder
from cdc_core.binlog.event_loop import EventLoop
from cdc_core.binlog.events import PreparedCommit
from cdc_core.binlog.undecodable import CompressedTransaction
from cdc_core.offset.position import master_position
from pipelines.lake.tables import table_uri
from tests.binlog_bytes import (
    compressing,
    load_sequence,
    payload_events,
    positioned,
    recorded_opener,
    transaction_payload,
)
from tests.helpers import assert_equal
from tests.test_event_loop import READERS, P
from tests.test_stream import stream_until_now

# --- end to end on the real server ---------------------------------------------------------------------------


@pytest.fixture
def compressed(monkeypatch, tmp_path):
    """The stream's reader reads the server's transactions as compressed ones; returns a function that counts
    the payloads the reader processes have read (each writes a line per payload to a file)."""
    tally = tmp_path / "payloads"
    server_source = binlog_reader.server_source

    def count() -> None:
        with tally.open("a") as f:
            f.write("payload\n")

    def source(conn, server_id, **options):
        return compressing(server_source(conn, server_id, **options), count)

    monkeypatch.setattr(binlog_reader, "server_source", source)  # the reader process is forked: it inherits it
    return lambda: len(tally.read_text().splitlines()) if tally.exists() else 0


def _transactions(cur, first: int) -> None:
    cur.execute("BEGIN")  # three statements: three row events ending at the payload's one position
    for i in range(3):
        cur.execute("INSERT INTO t VALUES (%s, %s, %s)", (first + i, f"v{i}", f'{{"n": {i}}}'))
    cur.execute("UPDATE t SET v = CONCAT(v, '!') WHERE id = %s", (first,))
    cur.execute("INSERT INTO k VALUES (%s, 'x'), (%s, 'x')", (first, first))  # keyless: two equal rows
    cur.execute("COMMIT")
    cur.execute("BEGIN")
    cur.execute(f"INSERT INTO t SELECT seq, 'bulk', NULL FROM seq_{first + 100}_to_{first + 600}")
    cur.execute("DELETE FROM t WHERE id = %s", (first + 1,))
    cur.execute("DELETE FROM k WHERE w = 'x' LIMIT 1")
    cur.execute("COMMIT")


def test_compressed_transactions_stream_exactly_once(db, make_config, compressed):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), j JSON)")
        cur.execute("CREATE TABLE k (n INT, w VARCHAR(5))")
        start = master_position(cur)
        _transactions(cur, 1)
    cfg = make_config(name, source={"startup": {"mode": "specific", "file": start.file, "pos": start.pos}})
    first = stream_until_now(cfg)
    assert_equal(cfg, [f"{name}.t", f"{name}.k"])
    assert compressed() == 2 and first.changes == 3 + 1 + 2 + 501 + 1 + 1

    with conn.cursor() as cur:
        _transactions(cur, 1000)
    again = stream_until_now(cfg)  # a restart from the checkpoint after the first payloads
    assert_equal(cfg, [f"{name}.t", f"{name}.k"])
    assert again.changes == first.changes  # the first run's payloads are not applied again
    assert compressed() == 4

    rows = DeltaTable(table_uri(cfg.sink.path, f"{name}.t")).to_pyarrow_table().to_pylist()
    seqs = {r["id"]: r["_cdc_seq"] for r in rows}
    for base in (1, 1000):  # ids base and base + 2 were inserted by the first and third statement of one payload
        assert seqs[base] >> 12 == seqs[base + 2] >> 12  # one position
        assert seqs[base + 2] != seqs[base] and seqs[base] > seqs[base + 2]  # the UPDATE (4th row) came last


# --- constructed payloads: what is refused ----------------------------------------------------------------------


def _vitess_inner() -> list[bytes]:
    """The inner events (no trailers) of the corpus's vitess payload, as recorded."""
    import zstandard

    seq = load_sequence("vitess_transaction_payload")
    inner = payload_events(seq.events[0].body,
                           lambda data, size: zstandard.ZstdDecompressor().decompress(data, max_output_size=size))
    return [e.raw for e in inner]


def _around(event: bytes) -> list:
    """``event`` as the only event of a binlog, ending at 300 (the position every reader of
    tests/test_event_loop.py reads)."""
    ((_, raw),) = positioned([event], first=300 - len(event))
    return [(P(300), raw)]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("make, says", [
    (lambda inner: transaction_payload(inner, timestamp=1, server_id=1, log_pos=300, compression=7),
     "compression type 7 is not zstd"),
    (lambda inner: transaction_payload(inner, timestamp=1, server_id=1, log_pos=300, uncompressed_size=1 << 40),
     "more than binlake decodes"),
    (lambda inner: transaction_payload(inner, timestamp=1, server_id=1, log_pos=300, uncompressed_size=10),
     "does not decompress to its stated size"),
])
def test_every_reader_stops_at_a_compressed_transaction_it_cannot_open(reader, make, says):
    opener = recorded_opener(_around(make(_vitess_inner())))
    with pytest.raises(CompressedTransaction, match=rf"ending at binlog.000001:300 \(TRANSACTION_PAYLOAD_EVENT, "
                                                    rf"type 40\).*that binlake cannot decode: .*{says}.*"
                                                    r"binlog_transaction_compression is ON"):
        READERS[reader](opener, P(4), P(500))


def test_the_bound_is_checked_against_the_data_too(monkeypatch):
    """A payload whose header states a small size but whose data is bigger than the bound stops at the bound."""
    monkeypatch.setattr(payload, "MAX_UNCOMPRESSED", 100)
    inner = _vitess_inner()
    event = transaction_payload(inner, timestamp=1, server_id=1, log_pos=300)
    with pytest.raises(CompressedTransaction, match="more than binlake decodes"):
        READERS["stream"](recorded_opener(_around(event)), P(4), P(500))


def test_a_payload_stored_uncompressed_is_read(monkeypatch):
    monkeypatch.setattr("pymysqlreplication.row_event.fetch_column_names",
                        lambda ctl, schema, table, **kw: ["id", "email"])
    event = transaction_payload(_vitess_inner(), timestamp=1, server_id=1, log_pos=300, compression=payload.NONE)
    records = list(EventLoop(recorded_opener(_around(event)), P(4), decoder=RowDecoder()).records())
    (unit,) = [r for r in records if isinstance(r, PreparedCommit)]
    assert [row for ev in unit.events for row in ev.rows] == [(1, "mlord@planetscale.com"),
                                                              (2, "sup@planetscale.com")]
