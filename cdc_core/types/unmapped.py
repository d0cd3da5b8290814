"""Types binlake does not map: every column type no other codec claims (MariaDB 11.7's and
MySQL 9's VECTOR, a binlog type the library does not know...), and the one the DDL parser
knows by name, VECTOR, so that a statement naming it parses.

Every answer is the base codec's: :meth:`Codec.arrow_type` raises UnsupportedType (``validate``,
``snapshot`` and ``stream`` name the column and how to leave it out: cdc_core/types/mapping.py's
``unmappable``), the checksum leaves the column out, no DEFAULT value is known.

Tested by tests/test_types.py (test_validate_names_what_leaves_a_column_out),
tests/test_bad_input_limits.py (test_a_type_binlake_does_not_map), tests/test_ddl_corpus.py.
"""

from __future__ import annotations

from cdc_core.schema.table import Column
from cdc_core.types.codec import Codec, DeclaredType


class Unmapped(Codec):
    """Any column type binlake does not map."""


class Vector(Unmapped):
    data_types = frozenset({"vector"})

    def declared_column(self, name: str, t: DeclaredType, nullable: bool) -> Column:
        return Column(name, "vector", f"vector({t.args[0]})" if t.args else "vector", nullable)


UNMAPPED = Unmapped()
CODECS = (Vector(),)
