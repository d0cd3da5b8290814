"""Rows of every column kind cdc_core/binlog/columnar.py decodes, for tests/test_stream.py and
tests/test_columnar.py."""

from __future__ import annotations

import random
from decimal import Decimal

# Every column kind cdc_core/binlog/columnar.py decodes.
COLUMNAR_TYPES = {
    "ti": "TINYINT", "tiu": "TINYINT UNSIGNED", "si": "SMALLINT", "siu": "SMALLINT UNSIGNED", "mi": "MEDIUMINT",
    "miu": "MEDIUMINT UNSIGNED", "i": "INT", "iu": "INT UNSIGNED", "bi": "BIGINT", "biu": "BIGINT UNSIGNED",
    "f": "FLOAT", "d": "DOUBLE", "d18": "DECIMAL(18,4)", "d12": "DECIMAL(12,2) UNSIGNED", "d5": "DECIMAL(5,0)",
    "d10": "DECIMAL(10,10)", "d17": "DECIMAL(17,8)", "dt": "DATE", **{f"dt{p}": f"DATETIME({p})" for p in range(7)},
    **{f"ts{p}": f"TIMESTAMP({p}) NULL" for p in range(7)}, "vc": "VARCHAR(20)", "vl": "VARCHAR(300)",
    "ch": "CHAR(5)",
}


def columnar_row(rng: random.Random, i: int, patterned: bool = True) -> tuple:
    """Row ``i`` of COLUMNAR_TYPES: extremes, zero dates, fractions, negative decimals, NULLs (in one
    of five patterns, as cdc_core/binlog/columnar.py reads few null bitmaps a table map; else anywhere)."""
    def null(j: int) -> bool:
        return bool(i % 5) and j % 4 == i % 5 - 1 if patterned else rng.random() < 0.15

    return (i, *(None if null(j) else _columnar_value(rng, c, i) for j, c in enumerate(COLUMNAR_TYPES)))


def _columnar_value(rng: random.Random, column: str, i: int):
    """A value of ``column`` (COLUMNAR_TYPES)."""
    t = COLUMNAR_TYPES[column]
    if "INT" in t:
        bits = {"TI": 8, "SM": 16, "ME": 24, "IN": 32, "BI": 64}[t[:2]]
        lo, hi = (0, 2 ** bits - 1) if "UNSIGNED" in t else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
        return rng.choice([lo, hi, 0, rng.randint(lo, hi)])
    if t in ("FLOAT", "DOUBLE"):
        return rng.choice([0.0, -1.5, 3.25e38 if t == "FLOAT" else 1.7e308, rng.uniform(-1e6, 1e6)])
    if t.startswith("DECIMAL"):
        p, s = (int(x) for x in t[8:].split(")")[0].split(","))
        digits = rng.choice([0, 10 ** p - 1, rng.randrange(10 ** p)]) * (1 if "UNSIGNED" in t else rng.choice([1, -1]))
        return str(Decimal(digits).scaleb(-s))
    if t == "DATE":
        return rng.choice(["0000-00-00", "1000-01-01", "9999-12-31", "2024-02-29", f"19{i % 100:02d}-03-15"])
    if t.startswith(("DATETIME", "TIMESTAMP")):
        fraction = f".{rng.randrange(10 ** 6):06d}"
        if t.startswith("TIMESTAMP"):
            return rng.choice(["0000-00-00 00:00:00", "1970-01-01 00:00:01", "2038-01-19 03:14:07",
                               f"20{i % 30:02d}-07-04 12:34:56"]) + fraction
        return rng.choice(["0000-00-00 00:00:00", "1000-01-01 00:00:00", "9999-12-31 23:59:59",
                           f"19{i % 100:02d}-12-31 23:59:59"]) + fraction
    size = 300 if t == "VARCHAR(300)" else 5 if t == "CHAR(5)" else 20
    return "".join(rng.choice("aé€😀 z") for _ in range(rng.randrange(size + 1)))[:size]
