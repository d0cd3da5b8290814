"""The table modes' parts on real Delta tables, without a server (cdc_core/schema/modes.py,
cdc_core/batch/mode_batch.py, pipelines/lake/versions.py, pipelines/lake/feed.py):

- random row events (inserts, updates, key moves, deletes, re-inserts) cut into random
  batches: a history table holds exactly every version of every key, each ending where the
  key's next change begins, one current version per live key; a soft_delete table holds the
  live rows and a tombstone (the before image) of every deleted key; the stamps are each row's
  own change's, also where events share a position or a row index passes 4,095;
- validity times never step back, also across batches (the version Delta holds is lifted to);
- a key's new versions go into the file that held its current version; other files are not
  rewritten;
- the change feed appends a batch's changes once, however often the batch is applied;
- TRUNCATE's ``end_all`` closes every current version and makes every live row a tombstone;
- the example queries of docs/history.md, run by DuckDB's delta extension, answer "as of T"
  and "changes since T" right.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from pathlib import Path

import pytest
from deltalake import CommitProperties, DeltaTable

from cdc_core.batch.mode_batch import HistoryBatch, StampedBatch, mode_arrow, mode_batch
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.schema.modes import FEED_COLUMNS, SinkColumns, TableMode
from cdc_core.schema.output import output_schema
from cdc_core.schema.table import Column, TableSchema
from pipelines.lake.apply import apply_changes
from pipelines.lake.feed import append_changes
from pipelines.lake.tables import ensure_table
from pipelines.lake.versions import apply_history, end_all, key_table

SCHEMA = TableSchema("d", "t", (Column("id", "int", "int(11)"), Column("v", "int", "int(11)")), ("id",))
HISTORY = SinkColumns(TableMode.HISTORY, ts=True, position=True, feed=True)
SOFT = SinkColumns(TableMode.SOFT_DELETE, ts=True, position=True)
KEY = ("id",)


def _events(rng: random.Random, n: int) -> list[tuple]:
    """Random valid row events (op, rows, position, timestamp) against a table MySQL holds;
    timestamps may step back a second (statements that started earlier commit later)."""
    table: dict[int, int] = {}
    out = []
    t = 1_000_000
    for i in range(n):
        pos = BinlogPosition("binlog.000001", 1000 + 100 * i)
        t += rng.choice((0, 0, 1, 2, -1))
        r = rng.random()
        if r < 0.35 or not table:
            k = rng.randrange(40)
            if k in table:
                continue
            table[k] = rng.randrange(1000)
            out.append(("c", [(k, table[k])], pos, t))
        elif r < 0.7:
            ks = rng.sample(list(table), min(len(table), rng.randint(1, 3)))  # several rows in one event
            rows = []
            for k in ks:
                before = (k, table[k])
                table[k] = rng.randrange(1000)
                rows.append((before, (k, table[k])))
            out.append(("u", rows, pos, t))
        elif r < 0.8:
            k = rng.choice(list(table))
            new = rng.randrange(40)
            if new in table:
                continue
            before = (k, table.pop(k))
            table[new] = before[1]
            out.append(("u", [(before, (new, before[1]))], pos, t))
        else:
            k = rng.choice(list(table))
            out.append(("d", [(k, table.pop(k))], pos, t))
    return out


def _reference(events: list[tuple]) -> dict[int, list[tuple]]:
    """Per key, its versions (seq, op, v, valid_to_seq or None) and, last, None if deleted."""
    versions: dict[int, list[list]] = defaultdict(list)
    for op, rows, pos, _t in events:
        for i, r in enumerate(rows):
            seq = pos.seq(i)
            if op == "u" and r[0][0] != r[1][0] or op == "d":
                gone = r[0] if op == "u" else r
                versions[gone[0]][-1][3] = seq
            if op == "u" and r[0][0] == r[1][0]:
                versions[r[1][0]][-1][3] = seq
                versions[r[1][0]].append([seq, "u", r[1][1], None])
            elif op in ("c", "u"):
                after = r if op == "c" else r[1]
                versions[after[0]].append([seq, op, after[1], None])
    return {k: [tuple(x) for x in v] for k, v in versions.items()}


def _batches(rng: random.Random, events: list[tuple]):
    i = 0
    while i < len(events):
        n = rng.randint(1, 12)
        yield events[i:i + n]
        i += n


def _fill(batch, events) -> None:
    for op, rows, pos, t in events:
        batch.add_event(op, rows, pos, t * 1_000_000, f"0-1-{pos.pos}")


def _table(tmp_path: Path, columns: SinkColumns) -> DeltaTable:
    return ensure_table(str(tmp_path / "t"), output_schema(SCHEMA, columns.fields()))


@pytest.mark.parametrize("seed", range(4))
def test_history_batches_keep_every_version(tmp_path, seed):
    rng = random.Random(seed)
    events = _events(rng, 160)
    dt = _table(tmp_path, HISTORY)
    for part in _batches(rng, events):
        batch = HistoryBatch(SCHEMA, HISTORY)
        _fill(batch, part)
        plan = batch.plan()
        versions = mode_arrow(SCHEMA, plan.versions, HISTORY, batch.stamps)
        apply_history(dt, KEY, key_table(KEY, versions.schema, plan.keys), versions, CommitProperties(),
                      str(tmp_path / "t"))
    rows = DeltaTable(str(tmp_path / "t")).to_pyarrow_table().to_pylist()
    mine: dict[int, list[tuple]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["_cdc_seq"]):
        mine[r["id"]].append((r["_cdc_seq"], r["_cdc_op"], r["v"], r["_valid_to_seq"]))
    assert dict(mine) == _reference(events)
    by_key: dict[int, list[dict]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["_cdc_seq"]):
        by_key[r["id"]].append(r)
    for key, chain in by_key.items():
        assert [r["_is_current"] for r in chain[:-1]] == [False] * (len(chain) - 1)
        assert chain[-1]["_is_current"] == (chain[-1]["_valid_to_seq"] is None)
        froms = [r["_valid_from"] for r in chain]
        assert froms == sorted(froms), f"key {key}: validity steps back"
        for a, b in zip(chain, chain[1:]):
            if a["_valid_to_seq"] == b["_cdc_seq"]:
                assert a["_valid_to"] == b["_valid_from"], key
        for r in chain:
            assert r["_valid_to"] is None or r["_valid_to"] >= r["_valid_from"]


def test_times_are_lifted_to_the_version_delta_holds(tmp_path):
    dt = _table(tmp_path, HISTORY)
    first = HistoryBatch(SCHEMA, HISTORY)
    first.add_event("c", [(1, 10), (2, 20)], BinlogPosition("binlog.000001", 100), 500_000_000)
    plan = first.plan()
    v = mode_arrow(SCHEMA, plan.versions, HISTORY, first.stamps)
    apply_history(dt, KEY, key_table(KEY, v.schema, plan.keys), v, CommitProperties(), str(tmp_path / "t"))
    files = {a for a in DeltaTable(str(tmp_path / "t")).file_uris()}
    late = HistoryBatch(SCHEMA, HISTORY)  # a statement that started a second earlier, committed later
    late.add_event("u", [((1, 10), (1, 11))], BinlogPosition("binlog.000001", 200), 499_000_000)
    late.add_event("u", [((1, 11), (1, 12))], BinlogPosition("binlog.000001", 300), 498_000_000)
    plan = late.plan()
    assert [c[1:] for c in plan.keys] == [(499_000_000, BinlogPosition("binlog.000001", 200).seq(), True)]
    v = mode_arrow(SCHEMA, plan.versions, HISTORY, late.stamps)
    apply_history(dt, KEY, key_table(KEY, v.schema, plan.keys), v, CommitProperties(), str(tmp_path / "t"))
    after = DeltaTable(str(tmp_path / "t"))
    rows = sorted(after.to_pyarrow_table().to_pylist(), key=lambda r: (r["id"], r["_cdc_seq"]))
    one = [r for r in rows if r["id"] == 1]
    assert [r["v"] for r in one] == [10, 11, 12]
    assert {r["_valid_from"].timestamp() for r in one} == {500}  # lifted to the version Delta held
    assert one[0]["_valid_to"].timestamp() == 500 and [r["_cdc_ts"].timestamp() for r in one] == [500, 499, 498]
    # The file holding key 1's current version was replaced by one holding its new versions too.
    now = set(after.file_uris())
    assert len(now) == 1 and now != files


@pytest.mark.parametrize("seed", range(3))
def test_soft_delete_batches_keep_tombstones(tmp_path, seed):
    rng = random.Random(seed)
    events = _events(rng, 160)
    dt = _table(tmp_path, SOFT)
    for part in _batches(rng, events):
        batch = StampedBatch(SCHEMA, SOFT)
        _fill(batch, part)
        plan = batch.plan()
        assert not plan.delete and not plan.append  # every key may have a tombstone in Delta

        def rows(kind, plan=plan, stamps=batch.stamps):
            return mode_arrow(SCHEMA, getattr(plan, kind), SOFT, stamps)
        apply_changes(dt, KEY, rows("append"), rows("upsert"), rows("delete"), CommitProperties(), str(tmp_path / "t"))
    held = {r["id"]: r for r in DeltaTable(str(tmp_path / "t")).to_pyarrow_table().to_pylist()}
    last: dict[int, tuple] = {}
    for op, rows_, pos, t in events:
        for i, r in enumerate(rows_):
            if op == "c":
                last[r[0]] = ("c", r[1], False, pos.seq(i), t)
            elif op == "d":
                last[r[0]] = ("d", r[1], True, pos.seq(i), t)
            else:
                if r[0][0] != r[1][0]:
                    last[r[0][0]] = ("d", r[0][1], True, pos.seq(i), t)
                last[r[1][0]] = ("u", r[1][1], False, pos.seq(i), t)
    assert {k: (r["_cdc_op"], r["v"], r["_cdc_deleted"], r["_cdc_seq"], r["_cdc_ts"].timestamp())
            for k, r in held.items()} == last
    assert all(r["_cdc_position"] == f"0-1-{(r['_cdc_seq'] >> 12) & 0xFFFFFFFF}" for r in held.values())


def test_stamps_are_each_rows_own_events():
    """``_cdc_ts``/``_cdc_position`` are built per event and spread over its rows by ``_cdc_seq``:
    events in two binlog files and on a second server (a base), events sharing one position
    (a PreparedCommit's, rows numbered on), and an event past 4,096 rows each stamp exactly
    their own rows."""
    other = BinlogPosition("binlog.000001", 100).at_base(1 << 10)
    shared = BinlogPosition("binlog.000002", 100)
    events = [("c", [(i, i) for i in range(3)], BinlogPosition("binlog.000001", 100), 1_000_000, "0-1-7", 0),
              ("c", [(i, i) for i in range(3, 6)], BinlogPosition("binlog.000002", 100), 2_000_000, None, 0),
              ("c", [(i, i) for i in range(6, 9)], other, 3_000_000, "0-2-1", 0),
              ("c", [(i, i) for i in range(9, 11)], shared.at("binlog.000002", 900), 4_000_000, "0-1-9", 0),
              ("c", [(i, i) for i in range(11, 13)], shared.at("binlog.000002", 900), 4_000_000, "0-1-9", 2),
              ("c", [(i, i) for i in range(13, 5013)], BinlogPosition("binlog.000003", 4), 5_000_000, "0-1-10", 0)]
    for columns in (SinkColumns(ts=True, position=True), SinkColumns(ts=True, position=True, feed=True), SOFT,
                    HISTORY):
        batch = mode_batch(SCHEMA, columns)
        want = {}
        for op, rows, pos, t, gtid, first in events:
            batch.add_event(op, rows, pos, t, gtid, first)
            want.update({r[0]: (t, gtid or f"{pos.file}:{pos.pos}") for r in rows})
        plan = batch.plan()
        written = plan.versions if columns.history else plan.append + plan.upsert
        for rows, layout in ((written, columns), *(((batch.log, FEED_COLUMNS),) if columns.feed else ())):
            got = mode_arrow(SCHEMA, rows, layout, batch.stamps).to_pylist()
            assert len(got) == len(want), columns
            assert {r["id"]: (int(r["_cdc_ts"].timestamp() * 1_000_000), r["_cdc_position"]) for r in got} == want


def test_change_feed_appends_a_batch_once(tmp_path):
    batch = HistoryBatch(SCHEMA, HISTORY)
    events = [("c", [(1, 1), (2, 2)], BinlogPosition("binlog.000001", 100), 5),
              ("u", [((1, 1), (1, 3))], BinlogPosition("binlog.000001", 200), 6),
              ("d", [(2, 2)], BinlogPosition("binlog.000001", 300), 7)]
    _fill(batch, events)
    feed = ensure_table(str(tmp_path / "f"), output_schema(SCHEMA, FEED_COLUMNS.fields()))
    rows = mode_arrow(SCHEMA, batch.log, FEED_COLUMNS, batch.stamps)
    first = StreamOffset(BinlogPosition("binlog.000001", 200), BinlogPosition("binlog.000001", 200))
    assert append_changes(feed, rows.slice(0, 3), "p", first) == 3  # a crash after the feed, before the table
    end = StreamOffset(BinlogPosition("binlog.000001", 300), BinlogPosition("binlog.000001", 300))
    assert append_changes(feed, rows, "p", end) == 1  # the batch read again: only what the feed lacks
    assert append_changes(feed, rows, "p", end) == 0
    got = DeltaTable(str(tmp_path / "f")).to_pyarrow_table().sort_by("_cdc_seq").to_pylist()
    assert [(r["id"], r["v"], r["_cdc_op"]) for r in got] == [(1, 1, "c"), (2, 2, "c"), (1, 3, "u"), (2, 2, "d")]


def test_end_all_closes_and_tombstones(tmp_path):
    dt = _table(tmp_path / "h", HISTORY)
    batch = HistoryBatch(SCHEMA, HISTORY)
    batch.add_event("c", [(1, 1), (2, 2)], BinlogPosition("binlog.000001", 100), 5_000_000)
    plan = batch.plan()
    v = mode_arrow(SCHEMA, plan.versions, HISTORY, batch.stamps)
    apply_history(dt, KEY, key_table(KEY, v.schema, plan.keys), v, CommitProperties(), str(tmp_path / "h" / "t"))
    end_all(dt, HISTORY, CommitProperties(), 9_000_000, 777, "0-1-9")
    rows = DeltaTable(str(tmp_path / "h" / "t")).to_pyarrow_table().to_pylist()
    assert {(r["_is_current"], r["_valid_to_seq"], r["_valid_to"].timestamp()) for r in rows} == {(False, 777, 9)}
    soft = _table(tmp_path / "s", SOFT)
    s = StampedBatch(SCHEMA, SOFT)
    s.add_event("c", [(1, 1), (2, 2)], BinlogPosition("binlog.000001", 100), 5_000_000)
    s.add_event("d", [(2, 2)], BinlogPosition("binlog.000001", 200), 6_000_000)
    up = mode_arrow(SCHEMA, s.plan().upsert, SOFT, s.stamps)
    apply_changes(soft, KEY, up.slice(0, 0), up, up.slice(0, 0), CommitProperties(), str(tmp_path / "s" / "t"))
    end_all(soft, SOFT, CommitProperties(), 9_000_000, 777, "0-1-9")
    rows = {r["id"]: r for r in DeltaTable(str(tmp_path / "s" / "t")).to_pyarrow_table().to_pylist()}
    assert rows[1]["_cdc_deleted"] and rows[1]["_cdc_seq"] == 777 and rows[1]["_cdc_position"] == "0-1-9"
    assert rows[2]["_cdc_seq"] == BinlogPosition("binlog.000001", 200).seq()  # a tombstone already: kept


# --- the documented queries -------------------------------------------------------------------

DOC = Path(__file__).resolve().parents[1] / "docs" / "history.md"


def _doc_queries() -> dict[str, str]:
    """docs/history.md's SQL blocks by the name in their first line (``-- name: ...``)."""
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.S)
    return {re.match(r"-- (.+)\n", b).group(1).strip(): b for b in blocks}


def _duckdb():
    import duckdb
    import duckdb_ext

    ext = next(p for root in duckdb_ext.__path__
               for p in Path(root).glob(f"extensions/v{duckdb.__version__}/*/delta.duckdb_extension"))
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{ext}'")
    return con


def _run(con, sql: str, lake: Path, since: str, seq: int) -> list[tuple]:
    sql = (sql.replace("'lake/shop/orders", f"'{lake}/shop/orders").replace("2026-01-01 10:00:00", since)
           .replace("123456789", str(seq)))
    return con.execute(sql).fetchall()


def test_documented_queries_answer_as_of_and_since(tmp_path):
    """Orders 1-3 written at 10:00:00, order 1 updated at 10:00:05 and 10:00:10, order 2 deleted
    at 10:00:07: the docs' queries, as DuckDB runs them, give the table as of 10:00:06 and
    the changes since 10:00:06, in every mode (the feed's ``_cdc_seq`` bound: order 1's first update)."""
    schema = TableSchema("shop", "orders", SCHEMA.columns, ("id",))
    base = 1_767_261_600  # 2026-01-01 10:00:00 UTC
    events = [("c", [(1, 10), (2, 20), (3, 30)], BinlogPosition("binlog.000001", 100), base),
              ("u", [((1, 10), (1, 11))], BinlogPosition("binlog.000001", 200), base + 5),
              ("d", [(2, 20)], BinlogPosition("binlog.000001", 300), base + 7),
              ("u", [((1, 11), (1, 12))], BinlogPosition("binlog.000001", 400), base + 10)]
    lake = tmp_path / "lake"
    modes = {"history": SinkColumns(TableMode.HISTORY, ts=True, position=True, feed=True),
             "soft_delete": SinkColumns(TableMode.SOFT_DELETE, ts=True, position=True),
             "current": SinkColumns(ts=True, position=True)}
    for mode, columns in modes.items():
        uri = str(lake / mode / "shop" / "orders")
        dt = ensure_table(uri, output_schema(schema, columns.fields()))
        for ev in events:  # one batch per event: versions close across batches too
            batch = (HistoryBatch if columns.history else StampedBatch)(schema, columns)
            _fill(batch, [ev])
            plan = batch.plan()
            if columns.history:
                v = mode_arrow(schema, plan.versions, columns, batch.stamps)
                apply_history(dt, KEY, key_table(KEY, v.schema, plan.keys), v, CommitProperties(), uri)
                feed = ensure_table(uri + "__changes", output_schema(schema, FEED_COLUMNS.fields()))
                append_changes(feed, mode_arrow(schema, batch.log, FEED_COLUMNS, batch.stamps), "p",
                               StreamOffset(ev[2], ev[2]))
            else:
                t = {k: mode_arrow(schema, getattr(plan, k), columns, batch.stamps)
                     for k in ("append", "upsert", "delete")}
                apply_changes(dt, KEY, t["append"], t["upsert"], t["delete"], CommitProperties(), uri)
    q = _doc_queries()
    con = _duckdb()
    since, seq = "2026-01-01 10:00:06", BinlogPosition("binlog.000001", 200).seq()
    h, s, c = (lake / m for m in ("history", "soft_delete", "current"))
    assert sorted(_run(con, q["history: the table as of a time"], h, since, seq)) == [(1, 11), (2, 20), (3, 30)]
    assert sorted(_run(con, q["history: changes since a time"], h, since, seq)) == [(1, "u", 12), (2, "d", 20)]
    assert sorted(_run(con, q["soft_delete: the table now"], s, since, seq)) == [(1, 12), (3, 30)]
    assert sorted(_run(con, q["soft_delete: changes since a time"], s, since, seq)) == [(1, "u", 12), (2, "d", 20)]
    assert sorted(_run(con, q["current: rows changed since a time"], c, since, seq)) == [(1, 12)]
    assert _run(con, q["change feed: changes since a position"], h, since, seq) == [(2, "d", 20), (1, "u", 12)]
    assert sorted(_run(con, q["change feed: the table as of a time"], h, since, seq)) == [(1, 11), (2, 20), (3, 30)]


def test_mysql_commit_time_in_microseconds_from_gtid_events():
    """``_cdc_ts`` where the server writes microseconds: MySQL 8's GTID event holds the original
    commit time after its logical clock (recorded 8.0.19 bytes, tests/mysql_binlogs/); a 5.7
    event holds none, and an 8.0 replica of a 5.7 source holds only its own (immediate) time."""
    from cdc_core.binlog.mysql_gtid import gtid_event
    from cdc_core.binlog.payload import event_body
    from tests.binlog_bytes import decode_pymysqlreplication, load_sequence, server_form

    seq = load_sequence("gomysql_gtid_8019")
    events = decode_pymysqlreplication([server_form(e) for e in seq.events], use_checksum=True)
    got = [gtid_event(event_body(e)).commit_us for e in events]
    want = [e["expect"]["original_commit_timestamp"] or e["expect"]["immediate_commit_timestamp"]
            for e in seq.expected["events"]]
    assert got == want == [1583812517644225, 0, 1583813191872618]
