"""The test oracle (tests/oracle_rows.py, tests/oracle_types.py) is independent of binlake and
finds what it is there to find:

- neither module imports binlake (cdc_core, pipelines, resources, orchestration, devtools),
  nor a test module that does;
- the type mapping parsed from docs/type-mapping.md gives, for every column of the type
  matrix (tests/test_types.py: MATRIX, literal Delta types), that column's Delta type, and the
  reserved columns' types; a document row it cannot read fails loudly;
- against a Delta table written here with deltalake (not by binlake), from literals: the
  oracle finds it equal, and finds each fault put into a copy: a value changed, a row lost,
  a row twice, a deleted row kept, FLOAT's stored bits rounded, a column of another width,
  a DECIMAL of another scale, a reserved column missing.
"""

from __future__ import annotations

import ast
import datetime as dt
import struct
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.oracle_rows import DeltaSide, compare_table, read_deltalake
from tests.oracle_types import ServerColumn, delta_arrow, doc_rows, documented_type, reserved_columns
from tests.test_types import GEOMETRY, MATRIX

PRODUCT = {"cdc_core", "pipelines", "resources", "orchestration", "devtools"}
ORACLE = [Path(__file__).with_name("oracle_rows.py"), Path(__file__).with_name("oracle_types.py")]


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
    return found


def test_the_oracle_imports_nothing_of_binlake():
    for path in ORACLE:
        modules = _imports(path)
        product = {m for m in modules if m.split(".")[0] in PRODUCT}
        assert not product, f"{path.name} imports {product}"
        # a test module it imports must be an oracle module itself (one importing binlake would carry it in)
        others = {m for m in modules if m.startswith("tests.")} - {f"tests.{p.stem}" for p in ORACLE}
        assert not others, f"{path.name} imports {others}"


def _documented(conn, ddl_type: str) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
                    "AND TABLE_NAME = 'types' AND COLUMN_NAME = %s", (ddl_type,))
        data_type, column_type = cur.fetchone()
    return documented_type(ServerColumn(ddl_type, data_type.lower(), column_type))


def test_document_types_are_the_matrix_types(db):
    """Every column type of the type matrix, as the server describes it, maps through the parsed
    document to the matrix's literal Delta type; the reserved columns are stated."""
    _, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE types (" + ", ".join(f"`{c}` {t}" for c, (t, _, _) in MATRIX.items()) + ")")
    wrong = {c: (t, d, _documented(conn, c)) for c, (t, d, _) in MATRIX.items()
             if _documented(conn, c).replace(" ", "") != d}
    assert not wrong, wrong
    assert delta_arrow("struct<wkb: binary, srid: long>") == delta_arrow(GEOMETRY.replace(":", ": "))
    assert reserved_columns() == {"_cdc_op": "string", "_cdc_seq": "long", "_cdc_source": "string"}
    assert len(doc_rows()) >= 29  # every mapping row of the Numbers, Dates, Strings and Spatial tables


def test_a_document_row_the_parser_cannot_read_fails():
    with pytest.raises(ValueError, match="TINY…LONG"):
        doc_rows("| MySQL type | Delta type | notes |\n|---|---|---|\n| SMALLTEXT…HUGETEXT | string | |\n")
    with pytest.raises(ValueError, match="no type name"):
        doc_rows("| MySQL type | Delta type | notes |\n|---|---|---|\n| any text | string | |\n")
    with pytest.raises(LookupError, match="maps no type 'vector"):
        documented_type(ServerColumn("emb", "vector", "vector(3)"))


def _schema(columns: dict[str, pa.DataType]) -> pa.Schema:
    return pa.schema([*columns.items(), ("_cdc_op", pa.string()), ("_cdc_seq", pa.int64())])


COLUMNS = {"id": pa.int32(), "f": pa.float32(), "price": pa.decimal128(10, 2), "at": pa.timestamp("us", tz="UTC"),
           "t": pa.int64(), "bits": pa.binary(), "z": pa.int64()}
F = struct.unpack("f", struct.pack("f", 1.0000001))[0]  # the FLOAT the server stores; its text is '1'
ROWS = [
    {"id": 1, "f": F, "price": Decimal("1.50"), "at": dt.datetime(2024, 1, 2, 3, 4, 5, 600000, tzinfo=dt.UTC),
     "t": -1_250_000, "bits": b"\x02\xab", "z": 42, "_cdc_op": "r", "_cdc_seq": 1},
    {"id": 2, "f": None, "price": None, "at": None, "t": None, "bits": None, "z": None, "_cdc_op": "u", "_cdc_seq": 2},
]


def _lake(tmp_path: Path, name: str, rows: list[dict], schema: pa.Schema | None = None) -> DeltaSide:
    uri = str(tmp_path / name)
    write_deltalake(uri, pa.Table.from_pylist(rows, schema=schema or _schema(COLUMNS)))
    return DeltaSide(uri)


def test_the_oracle_finds_each_fault(db, mariadb, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, f FLOAT, price DECIMAL(10,2), at TIMESTAMP(1) NULL, "
                    "t TIME(2), bits BIT(10), z INT(6) ZEROFILL)")
        cur.execute("SET time_zone = '+02:00'")  # the oracle reads TIMESTAMP as the UTC instant
        cur.execute("INSERT INTO t VALUES (1, 1.0000001, 1.5, '2024-01-02 05:04:05.6', '-00:00:01.25', "
                    "b'1010101011', 42), (2, NULL, NULL, NULL, NULL, NULL, NULL)")
    server = {"host": mariadb.host, "port": mariadb.port, "user": mariadb.user, "password": mariadb.password}
    table = f"{name}.t"

    def diff(side: DeltaSide, **kw):
        return compare_table(server, table, side, **kw)

    good = diff(_lake(tmp_path, "good", ROWS))
    assert good.equal and good.reader == "duckdb" and good.mysql_rows == good.delta_rows == 2, good.describe()
    assert diff(DeltaSide(good_uri := str(tmp_path / "good"))).equal
    assert read_deltalake(good_uri, None).num_rows == 2  # the object-store reader reads the same table

    changed = diff(_lake(tmp_path, "changed", [{**ROWS[0], "price": Decimal("1.51")}, ROWS[1]]))
    assert changed.different == [((1,), "price", Decimal("1.50"), Decimal("1.51"))]
    lost = diff(_lake(tmp_path, "lost", ROWS[:1]))
    assert lost.missing == [(2,)] and not lost.equal
    twice = diff(_lake(tmp_path, "twice", [*ROWS, ROWS[1]]))
    assert twice.different == [((2,), "<row count>", 1, 2)]
    kept = diff(_lake(tmp_path, "kept", [ROWS[0], {**ROWS[1], "_cdc_op": "d"}]))
    assert kept.problems == ["_cdc_op values ['d'] in Delta (only ['c', 'r', 'u'])"]
    rounded = diff(_lake(tmp_path, "rounded", [{**ROWS[0], "f": 1.0}, ROWS[1]]))
    assert rounded.different == [((1,), "f", F, 1.0)]

    wide = diff(_lake(tmp_path, "wide", ROWS, _schema({**COLUMNS, "id": pa.int64()})))
    assert wide.problems == ["column id (int(11)) is int64 in Delta, documented integer"]
    assert diff(DeltaSide(str(tmp_path / "wide")), widened=True).equal  # long holds every INT
    scale = diff(_lake(tmp_path, "scale", ROWS, _schema({**COLUMNS, "price": pa.decimal128(10, 3)})))
    assert scale.problems == ["column price (decimal(10,2)) is decimal128(10, 3) in Delta, documented decimal(10,2)"]
    no_seq = diff(_lake(tmp_path, "no_seq", [{k: v for k, v in r.items() if k != "_cdc_seq"} for r in ROWS],
                        _schema(COLUMNS).remove(_schema(COLUMNS).get_field_index("_cdc_seq"))))
    assert no_seq.problems == ["reserved column _cdc_seq is not in Delta"]
