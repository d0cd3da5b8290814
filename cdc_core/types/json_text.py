"""JSON: MariaDB's (an alias of LONGTEXT, kept as stored) and MySQL 8's binary JSON.

- Delta: string. MySQL 8's binary JSON, which the library decodes to Python objects, is
  serialised with ``json.dumps``; MariaDB's arrives as text (its table map says LONGTEXT; the
  schema history tells it apart, so both have the storage class of a string).
- Checksum: MD5 of the utf8 text, as the long character strings; left out on MySQL 8, where
  the server's text and ``json.dumps``'s differ in form.

Tested by tests/test_types.py (type matrix), tests/test_reconcile_checksum.py, tests/test_ddl_corpus.py.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pyarrow as pa
from pymysqlreplication.constants import FIELD_TYPE

from cdc_core.schema.table import Column
from cdc_core.types.charsets import decoder
from cdc_core.types.codec import Codec
from cdc_core.types.literals import text
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
        return v if isinstance(v, str) else json.dumps(v)  # MySQL binary JSON decoded to Python objects

    def table_map_column(self, col, collation: str | None) -> Column:
        return Column(col.name, "json", "json")

    def mysql_value(self, col: Column, q: str) -> str:
        return f"MD5({utf8(col, q)})"

    def delta_value(self, col: Column, r: str) -> str:
        return f"md5({r})"

    def checksum_exclusion(self, col: Column, mariadb: bool) -> str | None:
        if mariadb:
            return None
        return "MySQL's binary JSON: the server's text and binlake's json.dumps serialisation differ in form"

    def implicit_default(self, col: Column) -> object:
        return ""

    def default_value(self, col: Column, d: DefaultValue) -> object:
        return text(d)


CODECS = (Json(),)
