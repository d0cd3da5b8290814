"""Table maps parsed once per body (cdc_core/binlog/table_maps.py) against the library's own parse
of the same events, on a real MariaDB binlog."""

from __future__ import annotations

from pymysqlreplication.event import XidEvent
from pymysqlreplication.row_event import TableMapEvent, WriteRowsEvent

from cdc_core.binlog import table_maps
from cdc_core.binlog.event_source import open_binlog
from cdc_core.offset.position import master_position
from cdc_core.source.connection import connection_settings

PER_EVENT = {"packet", "table_map", "_ctl_connection", "timestamp", "_is_event_valid"}


def _read(cfg, start, end, offset: int, **options) -> list:
    """The table map and row events of (start, end], with the rows each row event holds."""
    reader = open_binlog(connection_settings(cfg), cfg.source.server_id + offset, start,
                         only_events=[TableMapEvent, WriteRowsEvent, XidEvent], **options)
    out = []
    try:
        for event in reader:
            if isinstance(event, TableMapEvent):
                out.append(event)
            elif isinstance(event, WriteRowsEvent):
                out.append([r["values"] for r in event.rows])
            if (reader.log_file, reader.log_pos) >= (end.file, end.pos):
                break
    finally:
        reader.close()
    return out


def _comparable(v):
    """``v`` as plain values: the library's objects (columns, tables, optional metadata) have no ``==``."""
    if isinstance(v, list | tuple):
        return [_comparable(x) for x in v]
    if isinstance(v, dict):
        return {k: _comparable(x) for k, x in v.items()}
    if type(v).__module__.startswith("pymysqlreplication"):
        return {k: _comparable(x) for k, x in vars(v).items()}
    return v


def test_a_table_map_seen_again_takes_the_first_parse_and_equals_the_librarys(db, make_config, monkeypatch):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20), e ENUM('x','y'), d DECIMAL(8,2))")
        cur.execute("CREATE TABLE u (id INT PRIMARY KEY)")
        start = master_position(cur)
        for i in range(3):
            cur.execute("INSERT INTO t VALUES (%s, %s, 'y', 1.5)", (i, f"n{i}"))
            cur.execute("INSERT INTO u VALUES (%s)", (i,))
        cur.execute("ALTER TABLE t ADD COLUMN extra INT DEFAULT 7")
        cur.execute("INSERT INTO t (id, name) VALUES (10, 'after')")
        end = master_position(cur)
    cfg = make_config(name)

    monkeypatch.setattr(table_maps, "_parsed", {})
    cached = _read(cfg, start, end, 61)
    with monkeypatch.context() as m:
        m.setattr(TableMapEvent, "__init__", table_maps._library_init)
        library = _read(cfg, start, end, 62)

    assert [type(e) for e in cached] == [type(e) for e in library]
    maps = [(c, lib) for c, lib in zip(cached, library) if isinstance(c, TableMapEvent)]
    assert len(maps) == 7
    for c, lib in maps:  # every attribute of the library's parse, equal; only the per-event ones differ
        assert set(vars(c)) == set(vars(lib))
        for k in set(vars(c)) - PER_EVENT:
            assert _comparable(getattr(c, k)) == _comparable(getattr(lib, k)), k
    assert [e for e in cached if not isinstance(e, TableMapEvent)] == \
        [e for e in library if not isinstance(e, TableMapEvent)]  # the rows, decoded with them
    t_maps = [c for c, _ in maps if c.table == "t"]
    assert all(m.table_obj is t_maps[0].table_obj for m in t_maps[1:3])  # one parse, one Table
    after = t_maps[3]  # the ALTER: another table id and columns, parsed anew
    assert after.table_obj is not t_maps[0].table_obj and after.table_id != t_maps[0].table_id
    assert [c.name for c in after.columns] == ["id", "name", "e", "d", "extra"]
    assert len(table_maps._parsed) == 3  # t before and after the ALTER, u


def test_table_maps_the_readers_filters_leave_out_are_not_kept_and_the_cache_is_bounded(db, make_config,
                                                                                        monkeypatch):
    name, conn = db
    with conn.cursor() as cur:
        for t in ("a", "b", "c"):
            cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY)")
        start = master_position(cur)
        for t in ("a", "b", "c"):
            cur.execute(f"INSERT INTO {t} VALUES (1)")
        end = master_position(cur)
    cfg = make_config(name)
    monkeypatch.setattr(table_maps, "_parsed", {})
    events = _read(cfg, start, end, 63, only_tables=["a"], only_schemas=[name])
    assert [e.table for e in events if isinstance(e, TableMapEvent)] == ["a"]
    assert [p["table"] for p in table_maps._parsed.values()] == ["a"]  # b and c: left out, not kept

    monkeypatch.setattr(table_maps, "_parsed", {})
    monkeypatch.setattr(table_maps, "CACHED_MAX", 2)
    events = _read(cfg, start, end, 64)
    assert [e.table for e in events if isinstance(e, TableMapEvent)] == ["a", "b", "c"]
    assert len(table_maps._parsed) == 1  # the third forgot the first two
