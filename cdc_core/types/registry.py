"""Which codec (cdc_core/types/codec.py) answers for a column: by its information_schema data
type, by a table map's binlog type, by a DDL type name.

A type family is one module of cdc_core/types/ whose ``CODECS`` lists its codecs; adding a
family is adding its module to :data:`FAMILIES`. A data type no codec claims is
:data:`~cdc_core.types.unmapped.UNMAPPED`'s (binlake does not map it).

Invariants (tests/test_codecs.py): no two codecs claim one data type or one DDL name, and
codecs sharing a binlog type tell its columns apart (``Codec.claims``); every data type of
tests/test_types.py's type matrix has its codec.
"""

from __future__ import annotations

from cdc_core.schema.table import Column
from cdc_core.types import (
    bit,
    decimals,
    enum_set,
    floating,
    geometry,
    integers,
    json_text,
    strings,
    temporal,
    text_forms,
    unmapped,
)
from cdc_core.types.codec import Codec
from cdc_core.types.unmapped import UNMAPPED

FAMILIES = (integers, decimals, floating, bit, temporal, strings, enum_set, json_text, geometry, text_forms, unmapped)

CODECS: tuple[Codec, ...] = tuple(c for family in FAMILIES for c in family.CODECS)
BY_DATA_TYPE: dict[str, Codec] = {t: c for c in CODECS for t in c.data_types}
_ALIASES: dict[str, str] = {a: t for c in CODECS for a, t in c.ddl_aliases.items()}


def _by_binlog_type() -> dict[int, tuple[Codec, ...]]:
    out: dict[int, tuple[Codec, ...]] = {}
    for c in CODECS:
        for t in c.binlog_types:
            out[t] = (*out.get(t, ()), c)
    return out


BY_BINLOG_TYPE = _by_binlog_type()


def codec_for(col: Column) -> Codec:
    """The codec of a column (as information_schema, a table map or a DDL describes it)."""
    return BY_DATA_TYPE.get(col.data_type, UNMAPPED)


def codec_for_type(data_type: str | None) -> Codec:
    """The codec of an information_schema data type."""
    return BY_DATA_TYPE.get(data_type, UNMAPPED)


def table_map_codec(col) -> Codec:
    """The codec of a python-mysql-replication table-map column, by the binlog type its table
    map declares (UNMAPPED for one no codec knows)."""
    for c in BY_BINLOG_TYPE.get(getattr(col, "binlake_type", col.type), ()):
        if c.claims(col):
            return c
    return UNMAPPED


def declared_name(name: str) -> str:
    """The data type a DDL type name (lower case) stands for: itself or the one it is an alias of."""
    return _ALIASES.get(name, name)


def declares(data_type: str) -> bool:
    """Whether ``data_type`` is a type binlake knows in DDL (mapped or not)."""
    return data_type in BY_DATA_TYPE
