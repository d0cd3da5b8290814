"""JSON: MariaDB's (an alias of LONGTEXT, kept as stored) and MySQL 8's binary JSON.

The canonical value is the JSON text the server gives for the column: what the snapshot's
SELECT reads (connectorx and pymysql return a MySQL JSON column as that text, a MariaDB one as
the stored text), so the binlog path gives the same string for the same value.

- Delta: string. MariaDB's JSON arrives as text (its table map says LONGTEXT; the schema history
  tells it apart). MySQL's binary JSON is read as its bytes (``prepare``: the library's own JSON
  decoding keeps strings as bytes and loses the JSON null, number and temporal forms) and written as
  MySQL writes it (cdc_core/types/mysql_json.py): ``{"a": 1, "b": [true, null]}``, a JSON null as
  ``null`` (an SQL NULL stays NULL). A partial JSON update's after image is that text of the before
  image with the update's diffs applied (cdc_core/binlog/json_diff.py).
- Checksum: MD5 of the utf8 text on both sides (the server's text is the canonical value).

Tested by tests/test_types.py (type matrix), tests/test_mysql_json.py, tests/test_mysql_corpus.py,
tests/test_reconcile_checksum.py, tests/test_ddl_corpus.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from pymysqlreplication.constants import FIELD_TYPE

from cdc_core.schema.table import Column
from cdc_core.types.charsets import decoder
from cdc_core.types.codec import Codec, ValueFix
from cdc_core.types.literals import text
from cdc_core.types.mysql_json import binary_text
from cdc_core.types.strings import utf8

if TYPE_CHECKING:
    from cdc_core.schema.column_def import DefaultValue


class Json(Codec):
    data_types = frozenset({"json"})
    binlog_types = frozenset({FIELD_TYPE.JSON})

    def arrow_type(self, col: Column) -> pa.DataType:
        return pa.string()

    def storage_class(self, col: Column) -> str:
        return "string"

    def binlog_value(self, col: Column, v: object) -> object:
        if isinstance(v, bytes):  # undecoded text
            return decoder(col.collation)(v)
        return v

    def table_map_column(self, col, collation: str | None) -> Column:
        return Column(col.name, "json", "json")

    def prepare(self, col) -> ValueFix | None:
        # the library reads a GEOMETRY value as its bytes (length, then data): a binary JSON value so
        col.type = FIELD_TYPE.GEOMETRY
        return binary_text

    def mysql_value(self, col: Column, q: str) -> str:
        return f"MD5({utf8(col, q)})"

    def delta_value(self, col: Column, r: str) -> str:
        return f"md5({r})"

    def implicit_default(self, col: Column) -> object:
        return ""

    def default_value(self, col: Column, d: DefaultValue) -> object:
        return text(d)


CODECS = (Json(),)
