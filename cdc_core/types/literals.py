"""A DEFAULT literal read as a number or as text, as the server reads it for a column of
another type (the codecs' ``default_value``; rules in cdc_core/schema/column_default.py,
checked by tests/test_ddl_corpus.py).

- A number is exact (``Decimal``) unless written with an exponent (then a ``float``); a
  string is trimmed of spaces, tabs and line breaks first; a hex or bit literal is the
  big-endian integer of its bytes; TRUE/FALSE are 1/0.
- Rounding to an integer is half away from zero for exact numbers and half to even
  (``rint``) for approximate ones.
- As text, a hex or bit literal is its bytes (undecodable ones kept as surrogates), TRUE and
  FALSE are ``1`` and ``0``, a number is written without exponent where it is whole.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdc_core.schema.column_def import DefaultValue

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def number(d: DefaultValue) -> Decimal | float:
    """A literal as a number: exact (Decimal) or approximate (float, written with an exponent)."""
    if d.kind == "bool":
        return Decimal(int(d.value))
    if d.kind == "bytes":
        return Decimal(int.from_bytes(d.value, "big"))
    text = str(d.value).strip(" \t\r\n")
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"{d.value!r} is not a number")
    return float(text) if "e" in text.lower() else Decimal(text)


def integral(v: Decimal | float) -> int:
    """A number rounded to an integer as the server rounds it."""
    if isinstance(v, float):
        return int(round(v))  # the server rounds a double half to even (rint)
    return int(v.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def text(d: DefaultValue) -> str:
    """A literal as text."""
    if d.kind == "string":
        return d.value
    if d.kind == "bytes":
        return d.value.decode("utf-8", "surrogateescape")
    if d.kind == "bool":
        return "1" if d.value else "0"
    v = number(d)
    if isinstance(v, float):
        return format(v, "g") if v != int(v) else str(int(v))
    return format(v, "f").lstrip("+")
