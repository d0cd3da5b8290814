"""Insert row events decoded into Arrow columns (cdc_core/binlog/columnar.py) against
python-mysql-replication's decoding of the same events, through binlake's tuple path's
canonical values (cdc_core/types/mapping.py: binlog_value) and Arrow's conversion of them."""

from __future__ import annotations

import dataclasses
import pickle
import random

import pyarrow as pa
from pymysqlreplication.event import XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_core.batch import table_batch
from cdc_core.batch.table_batch import TableBatch, plan_arrow
from cdc_core.binlog import row_images
from cdc_core.binlog.columnar import columns
from cdc_core.binlog.decoder import RowDecoder
from cdc_core.binlog.event_source import open_binlog
from cdc_core.binlog.row_images import ColumnarRows
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.schema.output import arrow_schema
from cdc_core.source.connection import connection_settings
from cdc_core.types.mapping import binlog_value
from tests.columnar_rows import COLUMNAR_TYPES, columnar_row


def test_columns_equal_the_library(db, make_config, monkeypatch):
    """Every column kind, NULLs in five patterns, extremes, zero dates, fractions 0..6, negative decimals,
    multi-byte text, in multi-row inserts and updates (NULLs set and cleared): the columns read from the
    packed events (pickled and unpickled, as the engine receives them) hold exactly ``pa.array`` of the
    library's values made canonical, of the Delta column's type, image for image in binlog order (an
    update's before image, then its after image); as a sequence they are the tuple path's tuples (an
    update's: pairs), a single-row insert's and a delete's too. Folded in one batch in Arrow, they plan
    exactly the rows the tuple path plans of the library's tuples, also when a change folded as tuples
    first holds keys the columns then meet (folded as tuples then)."""
    name, conn = db
    # The decoders this process compiled before for the same columns (tests/test_stream.py's rows with
    # NULLs anywhere close their layout to columns) are not this test's.
    monkeypatch.setattr(row_images, "_COMPILED", {})
    names = ", ".join(f"`{c}`" for c in COLUMNAR_TYPES)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = '', time_zone = '+00:00'")
        cur.execute("CREATE TABLE c (id BIGINT PRIMARY KEY, "
                    + ", ".join(f"`{c}` {t}" for c, t in COLUMNAR_TYPES.items()) + ")")
        start = master_position(cur)
        rng = random.Random(6)
        marks = ", ".join(["%s"] * (len(COLUMNAR_TYPES) + 1))
        cur.executemany(f"INSERT INTO c (id, {names}) VALUES ({marks})", [columnar_row(rng, i) for i in range(900)])
        cur.execute(f"INSERT INTO c (id, {names}) VALUES ({marks})", columnar_row(rng, 900))
        cur.execute("DELETE FROM c WHERE id < 100")
        cur.execute("UPDATE c SET id = id + 1000, ti = NULL, vc = 'ü' WHERE id % 3 = 0 ORDER BY id DESC")
        cur.execute("UPDATE c SET ti = 1, dt = NULL WHERE id % 3 = 1")
        end = master_position(cur)
    cfg = make_config(name)
    settings = connection_settings(cfg)
    got: dict[str, list] = {"packed": [], "library": []}
    deletes: dict[str, list] = {"packed": [], "library": []}
    updates: dict[str, list] = {"packed": [], "library": []}
    schema = None
    for i, how in enumerate(got):
        reader = open_binlog(settings, cfg.source.server_id + 40 + i, start,
                             only_events=[WriteRowsEvent, DeleteRowsEvent, UpdateRowsEvent, XidEvent])
        decoder = RowDecoder(packed=True)
        try:
            for event in reader:
                if isinstance(event, WriteRowsEvent | DeleteRowsEvent | UpdateRowsEvent) and event.table == "c":
                    d, _ = decoder.decoding(event)
                    schema = d.layout.schema
                    rows = decoder.rows(event, dataclasses.replace(d, images=None) if how == "library" else d)
                    rows = pickle.loads(pickle.dumps(rows, pickle.HIGHEST_PROTOCOL)) if how == "packed" else rows
                    kind = (got if isinstance(event, WriteRowsEvent) else
                            deletes if isinstance(event, DeleteRowsEvent) else updates)
                    kind[how].append(rows)
                if (reader.log_file, reader.log_pos) >= (end.file, end.pos):
                    break
        finally:
            reader.close()
    packed, library = got["packed"], got["library"]
    assert [len(r) for r in packed] == [len(r) for r in library] and sum(map(len, library)) == 901
    assert all(type(r) is ColumnarRows for r in packed) and len(packed[-1]) == 1  # the single row's too
    assert packed[-1].decoded and not packed[0].decoded  # (a small event's tuples decoded as it was unpickled)
    images = packed[0].images  # pickled as its columns' keys: unpickled, the decoder compiled for them
    assert images.keys == tuple(map(row_images.column_key, images.columns))
    assert pickle.loads(pickle.dumps(images)) is images and all(r.images is images for r in packed)
    assert len(packed) > 10  # several events (rows are logged about 8 KiB an event)
    target = arrow_schema(schema)
    update_images = [[image for pair in rows for image in pair] for rows in updates["library"]]
    for events, images in ((packed, library), (updates["packed"], update_images)):
        arrays = columns(events[0].images.columnar, [r.scan for r in events])
        assert arrays is not None
        values = [row for rows in images for row in rows]
        for i, (col, f) in enumerate(zip(schema.columns, target)):
            expected = pa.array([binlog_value(col, row[i]) for row in values], f.type)
            column = arrays[i] if arrays[i].type == f.type else arrays[i].cast(f.type)
            assert column.equals(expected), (col.name, column.to_pylist()[:8], expected.to_pylist()[:8])
            assert column.null_count > 0 or col.name == "id"  # every column has NULLs (the NULL pattern varies)
    assert [r for rows in packed for r in rows] == [r for rows in library for r in rows]  # the tuple path's tuples
    assert all(type(r) is ColumnarRows and r.op == "u" for r in updates["packed"])
    # 267 rows moved (to keys = 1 mod 3), then those and the 267 others = 1 mod 3 updated again
    assert updates["packed"] == updates["library"] and sum(map(len, updates["library"])) == 801
    assert deletes["packed"] == deletes["library"] and sum(map(len, deletes["library"])) == 100
    assert all(type(r) is ColumnarRows and r.op == "d" for r in deletes["packed"])

    def planned(events: list, columnar: bool) -> tuple[dict, dict]:
        """The plan of ``events`` (op, rows) in one batch: its Arrow part, and its rows of each kind."""
        with monkeypatch.context() as m:
            m.setattr(table_batch, "COLUMNAR_MIN_ROWS", 0 if columnar else 10 ** 9)
            batch = TableBatch(schema)
            for i, (op, rows) in enumerate(events):
                fresh = pickle.loads(pickle.dumps(rows, pickle.HIGHEST_PROTOCOL))  # tuples not decoded yet
                batch.add_event(op, fresh, BinlogPosition("binlog.000001", 4 + 100 * i))
            plan = batch.plan()
        return plan.arrow, {kind: sorted(map(repr, plan_arrow(schema, plan, kind).to_pylist()))
                            for kind in ("append", "upsert", "delete")}

    def events(how: str) -> list:
        return [(op, rows) for op, group in (("c", got), ("d", deletes), ("u", updates)) for rows in group[how]]

    _, expected = planned(events("library"), columnar=False)
    arrow, rows = planned(events("packed"), columnar=True)
    assert set(arrow) == {"append", "upsert"} and rows == expected  # keys moved to: upserted, as by the tuples
    # The first delete event folded as tuples: the inserts before it too, whose keys the later columns meet.
    first_delete = len(got["packed"])
    mixed = [(op, deletes["library"][0] if i == first_delete else rows)
             for i, (op, rows) in enumerate(events("packed"))]
    arrow, rows = planned(mixed, columnar=True)
    assert not arrow and rows == expected
