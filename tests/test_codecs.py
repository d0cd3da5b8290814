"""The codec registry (cdc_core/types/registry.py): every column finds exactly one codec, by
data type, DDL name or table-map type, and every mapped family answers the questions every
path asks. Pure: the type matrix's columns through the real parsers, no server (the
matrix's values through every path are tests/test_types.py's)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cdc_core.schema.change import column_from_def
from cdc_core.types import registry
from cdc_core.types.codec import Codec
from cdc_core.types.unmapped import UNMAPPED, Unmapped
from tests.test_types import COLUMNS

MAPPED = [c for c in registry.CODECS if not isinstance(c, Unmapped)]


def test_each_data_type_and_ddl_name_has_one_codec():
    """No two codecs claim a data type; an alias names a data type some codec claims."""
    claimed = [t for c in registry.CODECS for t in c.data_types]
    assert len(claimed) == len(set(claimed)) == len(registry.BY_DATA_TYPE)
    aliases = {a: t for c in registry.CODECS for a, t in c.ddl_aliases.items()}
    assert all(t in registry.BY_DATA_TYPE for t in aliases.values())
    assert all(registry.declared_name(a) == t and registry.declares(t) for a, t in aliases.items())


def test_a_shared_binlog_type_goes_to_exactly_one_codec():
    """Codecs sharing a binlog type (the character and binary strings) tell its columns apart."""
    for t, codecs in registry.BY_BINLOG_TYPE.items():
        for collation in ("binary", "utf8mb4_general_ci", None):
            col = SimpleNamespace(type=t, binlake_type=t, collation_name=collation)
            assert sum(c.claims(col) for c in codecs) == 1, (t, collation)
    assert registry.table_map_codec(SimpleNamespace(type=99, binlake_type=99)) is UNMAPPED


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_every_type_of_the_matrix_has_a_mapped_codec(name):
    """Each column type of tests/test_types.py's matrix, as the DDL parser reads it, finds a
    codec that maps it, and so does the data type its table map reports."""
    col = column_from_def(name, COLUMNS[name][0].replace(" PRIMARY KEY", ""))
    assert registry.codec_for(col) is not UNMAPPED, col
    registry.codec_for(col).arrow_type(col)


@pytest.mark.parametrize("codec", MAPPED, ids=lambda c: type(c).__name__)
def test_mapped_families_answer_what_every_path_asks(codec):
    """A mapped family gives its Delta type and its checksum rendering on both sides (the
    base codec's answer is "not mapped"), and one with binlog types describes their table-map
    columns."""
    for method in ("arrow_type", "mysql_value", "delta_value"):
        assert getattr(type(codec), method) is not getattr(Codec, method), method
    if codec.binlog_types:
        assert type(codec).table_map_column is not Codec.table_map_column
