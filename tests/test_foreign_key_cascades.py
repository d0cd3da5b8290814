"""Foreign-key actions MySQL does not write to the binlog (cdc_core/source/foreign_keys.py): a
parent's DELETE or UPDATE cascades to child rows inside InnoDB, and the binlog holds only
the parent's row change. The stream backfills each touched child (and theirs) online.
Before, Delta kept the child rows MySQL deleted and the keys MySQL changed."""

from __future__ import annotations

from deltalake import DeltaTable

from cdc_core.binlog.events import Op
from cdc_core.offset.position import master_position
from cdc_core.source.foreign_keys import Cascade, by_parent, cascades
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import table_uri
from tests.helpers import assert_equal
from tests.test_stream import stream_until_now

SCHEMA = [
    "CREATE TABLE p (id INT PRIMARY KEY, v VARCHAR(10))",
    "CREATE TABLE c (id INT PRIMARY KEY, p_id INT, FOREIGN KEY fk_c (p_id) REFERENCES p (id) "
    "ON DELETE CASCADE ON UPDATE CASCADE)",
    "CREATE TABLE g (id INT PRIMARY KEY, c_id INT, FOREIGN KEY fk_g (c_id) REFERENCES c (id) ON DELETE SET NULL)",
    "CREATE TABLE r (id INT PRIMARY KEY, p_id INT, FOREIGN KEY fk_r (p_id) REFERENCES p (id))",  # RESTRICT: no action
]


def test_which_parent_changes_fire():
    fk = Cascade("d.c", "d.p", "fk", on_delete="CASCADE", on_update="RESTRICT")
    assert fk.fires_on(Op.DELETE) and not fk.fires_on(Op.UPDATE) and not fk.fires_on(Op.INSERT)
    null = Cascade("d.g", "d.c", "fk", on_delete="NO ACTION", on_update="SET NULL", referenced=("Code",))
    assert null.fires_on(Op.UPDATE) and not null.fires_on(Op.DELETE)
    columns = ["id", "code", "v"]
    assert null.changes_key(columns, [((1, "a", "x"), (1, "b", "x"))])
    assert not null.changes_key(columns, [((1, "a", "x"), (1, "a", "y")), ((2, "c", "x"), (2, "c", "z"))])
    assert null.changes_key(["id", "v"], [((1, "x"), (1, "y"))])  # referenced column excluded: assume changed
    assert by_parent([fk, null]) == {"d.p": (fk,), "d.c": (null,)}


def test_cascaded_deletes_and_updates_are_backfilled(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        at = master_position(cur)
        for ddl in SCHEMA:
            cur.execute(ddl)
        cur.execute("INSERT INTO p SELECT seq, 'p' FROM seq_1_to_20")
        cur.execute("INSERT INTO c SELECT seq, 1 + seq % 20 FROM seq_1_to_200")
        cur.execute("INSERT INTO g SELECT seq, 1 + seq % 200 FROM seq_1_to_400")
        cur.execute("INSERT INTO r SELECT seq, 15 + seq % 5 FROM seq_1_to_10")
        found = cascades(cur, [f"{name}.{t}" for t in "pcgr"])
    assert [(f.child, f.parent, f.on_delete, f.on_update, f.referenced) for f in found] == [
        (f"{name}.c", f"{name}.p", "CASCADE", "CASCADE", ("id",)),
        (f"{name}.g", f"{name}.c", "SET NULL", "RESTRICT", ("id",))]
    cfg = make_config(name, source={"startup": {"mode": "specific", "file": at.file, "pos": at.pos}})
    stream_until_now(cfg)
    assert_equal(cfg, [f"{name}.{t}" for t in "pcgr"])
    with conn.cursor() as cur:
        cur.execute("DELETE FROM p WHERE id IN (1, 2, 3)")  # c rows deleted, g rows of those set NULL: unlogged
        cur.execute("UPDATE p SET id = 100 WHERE id = 4")  # c.p_id 4 -> 100: unlogged
        cur.execute("UPDATE p SET v = 'changed' WHERE id = 5")  # no referenced column changed: fires nothing
    stream_until_now(cfg)  # --until now finishes the backfills it requested
    assert_equal(cfg, [f"{name}.{t}" for t in "pcgr"])
    reasons = {(r.table, r.reason, str(r.state)) for r in ControlStore.of(cfg).backfills()}
    assert reasons == {(f"{name}.c", "cascade", "done"), (f"{name}.g", "cascade", "done")}
    # r's key is RESTRICT (nothing unlogged): never re-read; g was read again though c's deletes fire it.
    assert len(DeltaTable(table_uri(cfg.sink.path, f"{name}.r")).history()) < 10
