"""The one binlog decoder (cdc_core/binlog/decoder.py) against a real MariaDB: a table map
describes its columns as information_schema does; a layout is reported once per
change; rows are decoded with the columns they were written with, however late."""

from __future__ import annotations

import dataclasses
import pickle
from decimal import Decimal

from pymysqlreplication.event import QueryEvent, XidEvent
from pymysqlreplication.row_event import WriteRowsEvent

from cdc_core.binlog import decoder as decoder_module
from cdc_core.binlog import row_images, table_maps
from cdc_core.binlog.decoder import ROW_EVENTS, RowDecoder
from cdc_core.binlog.event_source import open_binlog
from cdc_core.binlog.events import Op, ReaderError, ReadFailure, RowsEvent, TransactionEnd
from cdc_core.binlog.row_images import ColumnarRows, PackedRows
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.schema.history import storage_class
from cdc_core.schema.table import describe_table
from cdc_core.source.connection import connection_settings
from cdc_core.types.mapping import arrow_type
from pipelines.stream.reader import undecoded_cut
from tests.test_types import COLUMNS, load_type_matrix


def _read(cfg, start, end, table: str, packed: bool = False):
    """(layout, is new, rows) for each row event of ``table`` in (start, end]."""
    reader = open_binlog(connection_settings(cfg), cfg.source.server_id + 77, start,
                         only_events=[*ROW_EVENTS, XidEvent, QueryEvent])
    decoder = RowDecoder(packed=packed)
    out = []
    try:
        for event in reader:
            if isinstance(event, ROW_EVENTS) and f"{event.schema}.{event.table}" == table:
                d, new = decoder.decoding(event)
                out.append((d.layout, new, decoder.rows(event, d), isinstance(event, WriteRowsEvent)))
            if (reader.log_file, reader.log_pos) >= (end.file, end.pos):
                break
    finally:
        reader.close()
    return out


def test_table_map_describes_every_type_as_information_schema(db, make_config):
    name, conn = db
    cols = ", ".join(f"`{c}` {t}" for c, (t, _) in COLUMNS.items())
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE types ({cols})")
        start = master_position(cur)
        cur.execute("INSERT INTO types (id) VALUES (1)")
        end = master_position(cur)
        declared = describe_table(cur, name, "types")
    cfg = make_config(name)
    ((layout, new, _, _),) = _read(cfg, start, end, f"{name}.types")
    assert new and layout.schema.primary_key == ("id",)
    assert [c.name for c in layout.schema.columns] == [c.name for c in declared.columns]
    for mine, theirs in zip(layout.schema.columns, declared.columns):
        assert storage_class(mine) == storage_class(theirs), mine.name
        # MariaDB's JSON is LONGTEXT in the binlog, INET4/INET6/UUID are BINARY: the history refines them.
        if theirs.data_type not in ("json", "inet4", "inet6", "uuid"):
            assert arrow_type(mine) == arrow_type(theirs), mine.name


def test_rows_keep_the_columns_they_were_written_with_and_layouts_change_once(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(10))")
        start = master_position(cur)
        cur.execute("INSERT INTO t VALUES (1, 10, 'x')")
        cur.execute("INSERT INTO t VALUES (2, 20, 'y')")
        cur.execute("ALTER TABLE t CHANGE COLUMN b b_long VARCHAR(200), ADD COLUMN c INT DEFAULT 5 FIRST")
        cur.execute("INSERT INTO t (id, a, b_long) VALUES (3, 30, 'z')")
        end = master_position(cur)
    events = _read(make_config(name), start, end, f"{name}.t")  # read after the ALTER ran
    assert [new for _, new, _, _ in events] == [True, False, True]
    assert [c.name for c in events[0][0].schema.columns] == ["id", "a", "b"]
    assert events[0][2] == [(1, 10, "x")] and events[1][2] == [(2, 20, "y")]
    assert [c.name for c in events[2][0].schema.columns] == ["c", "id", "a", "b_long"]
    assert events[2][2] == [(5, 3, 30, "z")] and events[2][0].id != events[0][0].id

def test_row_events_after_one_table_map_share_its_decoding_computed_once(db, make_config, monkeypatch):
    """One INSERT of many rows is one table map and several row events, and the next INSERT's table
    map has the same bytes (cdc_core/binlog/table_maps.py: the same ``Table``): the decoding is looked
    up by the table map's columns once, and the later events still get the library's corrections
    (a SET column, which a codec turns into text after the library, is left to the library)."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, s SET('a','b','c'), pad VARCHAR(200))")
        start = master_position(cur)
        cur.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, 'a,c', '{'x' * 150}')" for i in range(1, 401)))
        cur.execute("INSERT INTO t VALUES (401, 'b', 'y')")
        end = master_position(cur)
    monkeypatch.setattr(table_maps, "_parsed", {})
    keys = []
    real = decoder_module.column_key
    monkeypatch.setattr(decoder_module, "column_key", lambda col: keys.append(col.name) or real(col))
    events = _read(make_config(name), start, end, f"{name}.t")
    assert len(events) > 3  # the first INSERT's rows span several row events
    assert keys == ["id", "s", "pad"]  # once, not per row event nor per statement
    assert [new for _, new, _, _ in events] == [True] + [False] * (len(events) - 1)
    rows = [r for _, _, rs, _ in events for r in rs]
    assert rows == [(i, "a,c", "x" * 150) for i in range(1, 401)] + [(401, "b", "y")]


# The types cdc_core/binlog/row_images.py leaves to the library (with COMPRESSED columns; MariaDB's JSON is
# LONGTEXT in the binlog, which it decodes).
LIBRARY_TYPES = {"TIME", "BIT", "SET", "GEOMETRY", "POINT", "LINESTRING", "POLYGON", "MULTIPOINT",
                 "MULTILINESTRING", "MULTIPOLYGON", "GEOMETRYCOLLECTION"}


def test_fast_images_equal_the_library(db, mariadb, make_config, monkeypatch):
    """Every type of the matrix, alone beside the key, and every type row_images.py decodes together in
    one wide table (NULLs spread over a many-byte null bitmap): the row images cdc_core/binlog/row_images.py
    decodes are the library's (with binlog_columns.py's corrections), value for value and type for type,
    for inserts, updates (both images) and deletes, and so are its packed rows once pickled and unpickled (as
    the reader process hands them to the engine) and its rows read by the readers' loop (a table map's null
    bitmaps beyond those given generated code); the types it leaves to the library are the ones it names."""
    name, conn = db
    load_type_matrix(mariadb, conn, name)
    columns = [c for c, (t, _) in COLUMNS.items() if c != "id" and " AS (" not in t]
    library_only = {c for c in columns if " COMPRESSED" in COLUMNS[c][0]
                    or COLUMNS[c][0].split("(")[0].split()[0].upper() in LIBRARY_TYPES}
    tables = {f"f{i}": [c] for i, c in enumerate(columns)}
    tables["wide"] = [c for c in columns if c not in library_only]
    with conn.cursor() as cur:
        start = master_position(cur)
        for table, cols in tables.items():
            names = ", ".join(f"`{c}`" for c in cols)
            cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, "
                        + ", ".join(f"`{c}` {COLUMNS[c][0]}" for c in cols) + ")")
            cur.execute(f"INSERT INTO {table} (id, {names}) SELECT id, {names} FROM types")
            cur.execute(f"UPDATE {table} SET id = id + 100")
            cur.execute(f"DELETE FROM {table} WHERE id > 103")
        end = master_position(cur)
    cfg = make_config(name)
    settings = connection_settings(cfg)
    decoded: dict[str, list] = {}
    fast: set[str] = set()  # the tables whose rows row_images.py decoded
    # packed: the reader process's rows, decoded as the engine unpickles them; loop: no generated image code
    passes = ("fast", "packed", "library", "loop")
    for i, how in enumerate(passes):
        if how == "loop":
            monkeypatch.setattr(row_images, "_VARIANTS_MAX", 0)
        reader = open_binlog(settings, cfg.source.server_id + 78 + i, start, only_events=[*ROW_EVENTS, XidEvent])
        decoder = RowDecoder(packed=how == "packed")
        try:
            for event in reader:
                if isinstance(event, ROW_EVENTS) and event.table in tables:
                    d, _ = decoder.decoding(event)
                    if d.images is not None:
                        fast.add(event.table)
                    rows = decoder.rows(event, dataclasses.replace(d, images=None) if how == "library" else d)
                    if how == "packed":
                        assert (type(rows) is PackedRows) == (d.images is not None and bool(rows))
                        rows = pickle.loads(pickle.dumps([rows], pickle.HIGHEST_PROTOCOL))[0]
                        if type(rows) is ColumnarRows:  # an insert or update read as columns: a sequence of its tuples
                            rows = rows.tuples()
                    assert type(rows) is list
                    decoded.setdefault(event.table, []).append([rows, type(event).__name__])
                if (reader.log_file, reader.log_pos) >= (end.file, end.pos):
                    break
        finally:
            reader.close()

    def typed(v):
        return [typed(x) for x in v] if isinstance(v, list | tuple) else (type(v).__name__, str(v))

    def third(events, i):
        n = len(events) // len(passes)
        return events[i * n:(i + 1) * n]

    wrong = [(tables[t], how, typed(third(events, 0)[0]), typed(third(events, i)[0]))
             for t, events in decoded.items() for i, how in enumerate(passes)
             if typed(third(events, 0)) != typed(third(events, i))]
    assert not wrong, f"fast images differ from the library's: {wrong}"
    assert decoded.keys() == tables.keys()
    assert {kind for events in decoded.values() for _, kind in events} == {"WriteRowsEvent", "UpdateRowsEvent",
                                                                           "DeleteRowsEvent"}
    assert "wide" in fast and {c for t in fast for c in tables[t]} == set(columns) - library_only
    assert {"bi_u", "dec65", "dt6", "ts6", "d", "yr", "vc", "bl", "bn", "en", "enl1", "l1", "i6", "uu"} <= set(
        tables["wide"])


def test_packed_rows_that_fail_to_decode_end_the_taken_records_with_a_fatal_error(db, make_config):
    """Packed rows (the reader process's) are decoded as the engine unpickles them: an event whose data
    does not decode (here cut inside its first key) unpickles as ``Undecoded``, and the taker keeps the
    records before it, then a fatal ``ReaderError`` naming the table and position, and nothing after."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, d DECIMAL(12,2))")
        start = master_position(cur)
        cur.execute("INSERT INTO t VALUES (1, 10.25), (2, -3.5)")
        end = master_position(cur)
    ((layout, _, rows, _),) = _read(make_config(name), start, end, f"{name}.t", packed=True)
    assert type(rows) is PackedRows
    at = BinlogPosition("binlog.000001", 4)
    good = RowsEvent(layout.table, Op.INSERT, at, layout.id, rows, 0, 100)
    bad = dataclasses.replace(good, rows=PackedRows(rows.images, rows.data[:2], False))  # cut in its key
    after = TransactionEnd(at, None, 0)
    taken = undecoded_cut(pickle.loads(pickle.dumps([layout, good, bad, after], pickle.HIGHEST_PROTOCOL)))
    assert taken[:2] == [layout, dataclasses.replace(good, rows=[(1, Decimal("10.25")), (2, Decimal("-3.50"))])]
    assert len(taken) == 3 and type(taken[2]) is ReaderError and taken[2].kind == ReadFailure.FATAL
    assert f"{layout.table}'s rows at {at}" in taken[2].message
    assert undecoded_cut(pickle.loads(pickle.dumps([good, after]))) == [taken[1], after]
