"""Row events decoded into Arrow columns: the values of many rows at once, from the event's bytes,
instead of a tuple of Python objects per row.

A packed row event (cdc_core/binlog/row_images.py: ``PackedRows``) of a table map whose every column
is of a kind below is decoded in two steps (an update's before and after images are images in turn).
Where it is unpickled, :func:`scan` (code generated per table map over the null bitmaps met so far, at
most ``VARIANTS_MAX``) notes only where each image starts;
when the batch is planned, :func:`columns` finds each image's variant (its null bitmap) and where
its runs of fixed-size values start (an image's layout is fixed but for its strings' lengths), reads
each column of all its events' images from those positions with numpy, and builds Arrow arrays from
the buffers:

- integers (every width, signed and unsigned), FLOAT, DOUBLE: their little-endian bytes;
- DECIMAL(p ≤ 18, s): the packed digits as a scaled int64, Arrow decimal128(p, s);
- DATE as days, DATETIME(fsp) as wall-clock µs (timestamp, no zone), TIMESTAMP(fsp) as epoch
  µs (timestamp UTC): the values the tuple path's ``date``/``datetime`` objects give in Arrow;
- CHAR/VARCHAR/TEXT in a charset decoded as UTF-8: their bytes, offsets from the lengths.

Invariants (tests/test_columnar.py: the arrays equal the tuple path's values through
``pa.array``, and python-mysql-replication's; tests/test_stream.py: test_columnar_changes,
Delta equal to MySQL and to the tuple path):
- An array holds exactly what ``pa.array`` of the tuple path's values (after
  cdc_core/types/mapping.py: binlog_value) holds, of the same type: zero and impossible dates of
  DATETIME are NULL as the library makes them None, the zero TIMESTAMP NULL as binlog_value makes it.
- Whatever the tuple path would decode differently or fail on (an impossible DATE, which the
  tuple path's ``date`` refuses; a fraction or decimal group out of range; text that is not valid
  UTF-8; bytes that do not end where the event does; more null bitmaps than ``VARIANTS_MAX``)
  makes :func:`scan` or :func:`columns` return None: the caller decodes the events by the tuple
  path, which gives their values or its error (raised where the batch is planned, for a failure
  :func:`columns` finds).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pymysqlreplication.constants import FIELD_TYPE

from cdc_core.types.charsets import is_utf8
from cdc_core.types.codec import Reader, inline_of
from cdc_core.types.strings import CODEC_PREFIX

MAX_DECIMAL_PRECISION = 18  # digits an int64 holds
_INTS = {FIELD_TYPE.TINY: 1, FIELD_TYPE.SHORT: 2, FIELD_TYPE.INT24: 3, FIELD_TYPE.LONG: 4, FIELD_TYPE.LONGLONG: 8}
_STRINGS = (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB)
_DIGITS = 9
_DECIMAL_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes of a group of 0..8 leftover digits
_DAYS_IN_MONTH = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)
_US_PER_DAY = 86_400_000_000


@dataclass(frozen=True)
class Kind:
    """How one column's values are stored in a row image and read into an array: ``name`` one
    of int, float, decimal, date, datetime, timestamp, text; ``size`` its bytes (text: its length
    bytes); ``signed``; ``fsp``; ``precision`` and ``scale`` (decimal)."""

    name: str
    size: int
    signed: bool = True
    fsp: int = 0
    precision: int = 0
    scale: int = 0

    @property
    def fixed(self) -> bool:
        return self.name != "text"

    @property
    def arrow_type(self) -> pa.DataType:
        """The type of its arrays."""
        return _TYPES[self.name](self)


def column_kind(col, read: Reader) -> Kind | None:
    """The kind of a table-map column (prepared by cdc_core/binlog/columns.py) whose row reader is
    ``read``, or None when this module does not decode it."""
    t = col.type
    if t in _INTS:
        return Kind("int", _INTS[t], not col.unsigned)
    if t in (FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE):
        return Kind("float", 4 if t == FIELD_TYPE.FLOAT else 8)
    if t == FIELD_TYPE.NEWDECIMAL and col.precision <= MAX_DECIMAL_PRECISION:
        p, s = col.precision, col.decimals
        size = _DECIMAL_BYTES[(p - s) % _DIGITS] + 4 * ((p - s) // _DIGITS + s // _DIGITS) + _DECIMAL_BYTES[s % _DIGITS]
        return Kind("decimal", size, precision=p, scale=s)
    if t == FIELD_TYPE.DATE:
        return Kind("date", 3)
    if t in (FIELD_TYPE.DATETIME2, FIELD_TYPE.TIMESTAMP2):
        fsp = col.fsp or 0
        head = 5 if t == FIELD_TYPE.DATETIME2 else 4
        return Kind("datetime" if t == FIELD_TYPE.DATETIME2 else "timestamp", head + (fsp + 1) // 2, fsp=fsp)
    inline = inline_of(read)
    name = col.character_set_name or ""
    if (t in _STRINGS and inline is not None and inline.length_size and name.startswith(CODEC_PREFIX)
            and not name[len(CODEC_PREFIX):].startswith("z_") and is_utf8(name[len(CODEC_PREFIX):])):
        return Kind("text", inline.length_size)
    return None


@dataclass(frozen=True)
class _Variant:
    """The rows of one null bitmap: where each value is (``at[i]``: None for a NULL, else (segment,
    offset): segment k begins after the row's k-th non-NULL string), the string that ends each
    segment but the last (``texts``: its length's offset in the segment and the length's bytes),
    and its scan's code."""

    nulls: bytes
    at: tuple
    texts: tuple[tuple[int, int], ...]
    code: tuple[str, ...]  # the scan's lines for one row, from after the bitmap test


VARIANTS_MAX = 16  # null bitmaps per table map: the events of a table map with more go the tuple path


@dataclass
class Layout:
    """A table map's columns as this module decodes them (:func:`layout_of`), and the null bitmaps
    its rows have had so far, each a variant numbered in the order met."""

    kinds: tuple[Kind, ...]
    keep: tuple[int, ...] | None
    width: int  # the null bitmap's bytes
    variants: list[_Variant] = field(default_factory=list, repr=False)
    scanner: object = field(default=None, repr=False)  # the scan of every known variant's rows
    closed: bool = False  # a row had a null bitmap beyond VARIANTS_MAX: every event goes the tuple path

    def arrow_type(self, column: int) -> pa.DataType:
        """The type of the arrays of the table map's ``column`` (an index)."""
        return self.kinds[column].arrow_type

    def add(self, nulls: bytes) -> bool:
        """Know the rows of null bitmap ``nulls`` (False beyond ``VARIANTS_MAX``): the scan is made again."""
        if len(self.variants) >= VARIANTS_MAX:
            self.closed = True  # not scanned again only to find another bitmap
            return False
        self.variants.append(self._variant(nulls))
        self.scanner = self._scanner()
        return True

    def _variant(self, nulls: bytes) -> _Variant:
        bits = int.from_bytes(nulls, "little")
        at: list = []
        texts: list[tuple[int, int]] = []
        code = ["a(pos)"]
        # The current segment starts at ``base`` + ``skip`` (the first after the null bitmap); ``off``
        # is a value's offset in it.
        base, skip, off = "pos", self.width, 0
        for i, k in enumerate(self.kinds):
            if bits >> i & 1:
                at.append(None)
                continue
            at.append((len(texts), off))
            if k.fixed:
                off += k.size
                continue
            p = f"{base} + {skip + off}" if skip + off else base
            size = {1: f"buf[{p}]", 2: f"(buf[{p}] | buf[{p} + 1] << 8)"}.get(
                k.size, f"int.from_bytes(buf[{p}:{p} + {k.size}], 'little')")
            texts.append((off, k.size))
            code.append(f"p = {base} + {skip + off + k.size} + {size}")
            base, skip, off = "p", 0, 0
        if skip + off:
            code.append(f"pos = {base} + {skip + off}")
        else:  # the row ends with a string: the next one starts where it ends
            code[-1] = "pos" + code[-1][1:]
        return _Variant(nulls, tuple(at), tuple(texts), tuple(code))

    def _scanner(self):
        """The scan of an event's rows: per row, where its image starts to ``a``; it returns where it
        stopped: the end, or a row whose null bitmap no known variant has."""
        test = "buf[pos]" if self.width == 1 else f"buf[pos:pos + {self.width}]"
        lines = ["while pos < end:", f"    b = {test}"]
        for i, v in enumerate(self.variants):
            nulls = v.nulls[0] if self.width == 1 else repr(v.nulls)
            lines.append(f"    {'if' if i == 0 else 'elif'} b == {nulls}:")
            lines += [f"        {line}" for line in v.code]
        lines += ["    else:", "        return pos", "return pos"]
        source = "def scan(buf, pos, end, a):\n" + "".join(f"    {line}\n" for line in lines)
        scope: dict[str, object] = {}
        exec(source, scope)  # noqa: S102 - generated from column sizes, offsets and bitmaps only, no input text
        return scope["scan"]


def layout_of(columns: list, readers: tuple[Reader, ...], keep: tuple[int, ...] | None) -> Layout | None:
    """The columnar decoding of a table map's ``columns`` (with their row ``readers``), None when
    a column is of no kind this module decodes."""
    kinds = []
    for col, read in zip(columns, readers):
        k = column_kind(col, read)
        if k is None:
            return None
        kinds.append(k)
    return Layout(tuple(kinds), keep, (len(columns) + 7) // 8)


@dataclass(frozen=True)
class Scan:
    """An event's row images as :func:`scan` found them (``rows`` images; an update's row is two): where
    each starts in ``data`` (an array of machine integers: read by numpy, and freed, without an object
    per value)."""

    data: bytes
    rows: int
    at: array


def scan(layout: Layout, buf: bytes, min_rows: int = 0) -> Scan | None:
    """Where the images in ``buf`` (a row event's row data) start, or None when the
    tuple path must decode them (the bytes end elsewhere than the last image, too many null bitmaps)
    or there are fewer than ``min_rows`` images. The values are read later, many events' at once
    (:func:`columns`)."""
    if layout.closed:
        return None
    width, end, pos = layout.width, len(buf), 0
    at = array("q")
    try:
        while True:
            if layout.scanner is not None:
                pos = layout.scanner(buf, pos, end, at.append)
            if pos >= end:
                break
            if not layout.add(buf[pos:pos + width]):
                return None
    except IndexError:  # a length beyond the bytes
        return None
    return Scan(buf, len(at), at) if pos == end and len(at) >= min_rows else None


def columns(layout: Layout, scans: list[Scan]) -> list[pa.Array] | None:
    """The kept columns (table-map order) of the rows of ``scans`` (events of ``layout``, in
    order) as Arrow arrays, or None when the tuple path must decode them (see the module doc)."""
    try:
        return _columns(layout, scans)
    except (IndexError, ValueError, pa.ArrowInvalid):
        return None


def _columns(layout: Layout, scans: list[Scan]) -> list[pa.Array]:
    data = np.frombuffer(b"".join(s.data for s in scans), dtype=np.uint8)
    bases = np.cumsum([0] + [len(s.data) for s in scans[:-1]])
    at = np.frombuffer(b"".join(s.at for s in scans), dtype=np.int64) + np.repeat(bases, [s.rows for s in scans])
    n = len(at)
    variants = list(layout.variants)  # (the scans' rows are of these: a variant is added before its rows)
    parts = []
    if len(variants) == 1:  # every row: no reordering
        parts.append(((variants[0], _segments(variants[0], data, at, layout.width)), None))
    else:
        bitmaps = data[at[:, None] + np.arange(layout.width)]
        for v in variants:
            rows = np.flatnonzero((bitmaps == np.frombuffer(v.nulls, dtype=np.uint8)).all(axis=1))
            if len(rows):
                parts.append(((v, _segments(v, data, at[rows], layout.width)), rows))
    keep = range(len(layout.kinds)) if layout.keep is None else layout.keep
    return [_column(layout.kinds[c], c, data, n, parts) for c in keep]


def _segments(v: _Variant, data: np.ndarray, at: np.ndarray, width: int) -> list[np.ndarray]:
    """Where each segment of the rows of variant ``v`` whose images start at ``at`` starts: the first
    after the null bitmap, each next after the string ending the one before (its length read here)."""
    start = at + width
    out = [start]
    for off, size in v.texts:
        where = start + off
        length = data[where].astype(np.int64)
        for j in range(1, size):
            length |= data[where + j].astype(np.int64) << (8 * j)
        start = where + size + length
        out.append(start)
    return out


def _column(kind: Kind, c: int, data: np.ndarray, n: int, parts: list) -> pa.Array:
    """Column ``c`` of every row: read per null bitmap, placed in row order."""
    if not kind.fixed:
        return _text(kind, c, data, n, parts)
    values, valid = None, None
    for (v, starts), rows in parts:
        at = v.at[c]
        if at is None:
            if valid is None:
                valid = np.ones(n, dtype=bool)
            valid[rows if rows is not None else slice(None)] = False
            continue
        seg, off = at
        pos = np.asarray(starts[seg], dtype=np.int64) + off
        raw = data[pos[:, None] + np.arange(kind.size)]
        got, ok = _READ[kind.name](kind, raw)
        if rows is None:
            values, valid = got, ok
            break
        if values is None:
            values = np.zeros(n, dtype=got.dtype)
        values[rows] = got
        if ok is not None:
            if valid is None:
                valid = np.ones(n, dtype=bool)
            valid[rows] = ok
    if values is None:  # NULL in every row
        return pa.nulls(n, kind.arrow_type)
    return _array(kind, values, valid)


def _text(kind: Kind, c: int, data: np.ndarray, n: int, parts: list) -> pa.Array:
    """A string column: (start, length) per row from the segment starts, then its bytes gathered."""
    begin = np.zeros(n, dtype=np.int64)
    length = np.zeros(n, dtype=np.int64)
    valid = None
    for (v, starts), rows in parts:
        at = v.at[c]
        where = rows if rows is not None else slice(None)
        if at is None:
            if valid is None:
                valid = np.ones(n, dtype=bool)
            valid[where] = False
            continue
        seg, off = at
        first = np.asarray(starts[seg], dtype=np.int64) + off + kind.size  # after its length bytes
        begin[where] = first
        length[where] = np.asarray(starts[seg + 1], dtype=np.int64) - first  # the next segment starts at its end
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(length, out=offsets[1:])
    total = int(offsets[-1])
    idx = np.repeat(begin - offsets[:-1], length) + np.arange(total, dtype=np.int64)
    arr = pa.Array.from_buffers(pa.string(), n, [_validity(valid), pa.py_buffer(offsets.astype(np.int32)),
                                                 pa.py_buffer(data[idx])])
    arr.validate(full=True)  # UTF-8 (ArrowInvalid otherwise: the tuple path decodes it)
    return arr


def _validity(valid: np.ndarray | None) -> pa.Buffer | None:
    return None if valid is None else pa.array(valid, type=pa.bool_()).buffers()[1]


def _be(raw: np.ndarray) -> np.ndarray:
    """Big-endian unsigned integers of the rows of ``raw`` (at most 8 bytes each)."""
    out = np.zeros(len(raw), dtype=np.uint64)
    for j in range(raw.shape[1]):
        out = (out << np.uint64(8)) | raw[:, j].astype(np.uint64)
    return out


def _signed_be(raw: np.ndarray) -> np.ndarray:
    u = _be(raw).astype(np.int64)
    bits = 8 * raw.shape[1]
    return np.where(u >= 1 << (bits - 1), u - (1 << bits), u) if raw.shape[1] else u


def _int(kind: Kind, raw: np.ndarray) -> tuple[np.ndarray, None]:
    size = kind.size
    if size == 3:
        u = raw[:, 0].astype(np.int64) | raw[:, 1].astype(np.int64) << 8 | raw[:, 2].astype(np.int64) << 16
        return (np.where(u >= 1 << 23, u - (1 << 24), u) if kind.signed else u), None
    return np.ascontiguousarray(raw).view(f"<{'i' if kind.signed else 'u'}{size}").ravel(), None


def _float(kind: Kind, raw: np.ndarray) -> tuple[np.ndarray, None]:
    return np.ascontiguousarray(raw).view(f"<f{kind.size}").ravel(), None


def _decimal(kind: Kind, raw: np.ndarray) -> tuple[np.ndarray, None]:
    """MySQL's packed DECIMAL (cdc_core/types/decimals.py: packed) as its scaled integer."""
    raw = raw.copy()
    raw[:, 0] ^= 0x80
    negative = raw[:, 0] >= 0x80  # the sign bit was clear: stored inverted
    raw[negative] ^= 0xFF
    integral = kind.precision - kind.scale
    lead, tail_digits = _DECIMAL_BYTES[integral % _DIGITS], kind.scale % _DIGITS
    groups = integral // _DIGITS + kind.scale // _DIGITS
    digits = _be(raw[:, :lead]).astype(np.int64)
    pos = lead
    for _ in range(groups):
        g = _be(raw[:, pos:pos + 4]).astype(np.int64)
        if (g >= 10 ** _DIGITS).any():
            raise ValueError("a decimal group out of range")
        digits = digits * 10 ** _DIGITS + g
        pos += 4
    if tail_digits:
        digits = digits * 10 ** tail_digits + _be(raw[:, pos:]).astype(np.int64)
    if (digits >= 10 ** kind.precision).any():
        raise ValueError("a decimal beyond its precision")
    return np.where(negative, -digits, digits), None


def _days(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (valid ones)."""
    y = y - (m <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def _valid_date(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    month = np.clip(m, 0, 12)
    leap = (y % 4 == 0) & ((y % 100 != 0) | (y % 400 == 0))
    last = _DAYS_IN_MONTH[month] + ((month == 2) & leap)
    return (y >= 1) & (y <= 9999) & (m >= 1) & (m <= 12) & (d >= 1) & (d <= last)


def _date(kind: Kind, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = raw[:, 0].astype(np.int64) | raw[:, 1].astype(np.int64) << 8 | raw[:, 2].astype(np.int64) << 16
    y, m, d = v >> 9 & 0x7FFF, v >> 5 & 15, v & 31
    zero = (y == 0) | (m == 0) | (d == 0)  # None, as the library
    ok = _valid_date(y, m, d)
    if (~ok & ~zero).any():
        raise ValueError("an impossible date")  # the tuple path's ``date`` refuses it
    return np.where(ok, _days(y, m, d), 0).astype(np.int32), ok


def _fraction(kind: Kind, raw: np.ndarray) -> np.ndarray:
    """The microseconds of a DATETIME2/TIMESTAMP2's fraction bytes, as the tuple path adds them."""
    if not kind.fsp:
        return np.zeros(len(raw), dtype=np.int64)
    us = _signed_be(raw)
    if kind.fsp % 2:
        us = np.sign(us) * (np.abs(us) // 10)  # int(us / 10): towards zero
    us = np.where(us > 0, us * 10 ** (6 - kind.fsp), 0)
    if (us >= 1_000_000).any():
        raise ValueError("a fraction beyond a second")  # the tuple path's ``replace`` refuses it
    return us


def _datetime(kind: Kind, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = _be(raw[:, :5]).astype(np.int64)
    ym = v >> 22 & 0x1FFFF
    y, m, d, h, mi, s = ym // 13, ym % 13, v >> 17 & 31, v >> 12 & 31, v >> 6 & 63, v & 63
    ok = _valid_date(y, m, d) & (h < 24) & (mi < 60) & (s < 60)  # else None, as the library
    us = _fraction(kind, raw[:, 5:])
    t = (np.where(ok, _days(y, m, d), 0) * _US_PER_DAY + ((h * 60 + mi) * 60 + s) * 1_000_000 + us)
    return np.where(ok, t, 0), ok


def _timestamp(kind: Kind, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = _signed_be(raw[:, :4]) * 1_000_000 + _fraction(kind, raw[:, 4:])
    return t, t != 0  # the epoch is the zero TIMESTAMP: NULL (cdc_core/types/temporal.py)


_READ = {"int": _int, "float": _float, "decimal": _decimal, "date": _date, "datetime": _datetime,
         "timestamp": _timestamp}
_INT_TYPES = {(1, True): pa.int8(), (2, True): pa.int16(), (3, True): pa.int32(), (4, True): pa.int32(),
              (8, True): pa.int64(), (1, False): pa.uint8(), (2, False): pa.uint16(), (3, False): pa.uint32(),
              (4, False): pa.uint32(), (8, False): pa.uint64()}
_TYPES = {
    "int": lambda k: _INT_TYPES[k.size, k.signed],
    "float": lambda k: pa.float32() if k.size == 4 else pa.float64(),
    "decimal": lambda k: pa.decimal128(k.precision, k.scale),
    "date": lambda k: pa.date32(),
    "datetime": lambda k: pa.timestamp("us"),
    "timestamp": lambda k: pa.timestamp("us", tz="UTC"),
    "text": lambda k: pa.string(),
}


def _array(kind: Kind, values: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    t = kind.arrow_type
    n = len(values)
    if kind.name == "decimal":
        wide = np.empty((n, 2), dtype=np.int64)  # decimal128: little-endian two's complement
        wide[:, 0] = values
        wide[:, 1] = values >> 63
        return pa.Array.from_buffers(t, n, [_validity(valid), pa.py_buffer(wide)])
    values = np.ascontiguousarray(values, dtype=t.to_pandas_dtype() if kind.name in ("int", "float") else
                                  (np.int32 if kind.name == "date" else np.int64))
    return pa.Array.from_buffers(t, n, [_validity(valid), pa.py_buffer(values)])
