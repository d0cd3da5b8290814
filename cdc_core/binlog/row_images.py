"""Row images decoded straight from a row event's bytes, for the column types whose binlog
format is simple: the same values python-mysql-replication (with cdc_core/binlog/columns.py's
corrections) gives, at a fraction of its cost.

The library decodes every value through a chain of Python calls (a bitmap test, a walk down
a long ``if`` over the column type, a packet read, a struct unpack): about 3 µs a value, most
of the binlog reader's CPU time. :func:`compile_images` turns a table map into one reader
function per column, chosen once (each column's codec's ``row_reader``, cdc_core/types/<family>.py),
so decoding a row is at most one call per value over a ``bytes`` buffer. Each null bitmap a table
map's images carry (most images have none set, a table has few patterns) gets one generated function
that reads the non-NULL values in turn (no loop, no list): a run of fixed-size values (integers,
FLOAT, DOUBLE) by one ``struct`` unpack, a string by slicing it in place, the others by their
readers (:class:`cdc_core.types.codec.Inline` says which readers can be inlined); beyond
``_VARIANTS_MAX`` bitmaps, a loop over the readers reads the images (the same values).

Invariants (tests/test_binlog_decoder.py: test_fast_images_equal_the_library, also through the
readers' loop, and the type matrices of tests/test_types.py, which go through this path for the
types below):
- A value is exactly what the library returns for it: integers (signed and unsigned, every
  width), FLOAT, DOUBLE, DECIMAL, DATE, DATETIME(fsp), TIMESTAMP(fsp), YEAR, ENUM, and
  CHAR/VARCHAR/TEXT/BINARY/VARBINARY/BLOB values decoded with the column's binlake codec (or
  kept as bytes for a binary column). Invalid dates decode as the library decodes them (None,
  or the library's own error).
- A table map with any other column (TIME, SET, BIT, JSON, spatial, MariaDB compressed, the
  pre-5.6 temporal formats, a column without a name, a column a codec corrects after the
  library), a row event whose column bitmaps leave a column out (binlog_row_image other than
  FULL) or a partial JSON update is decoded by the library: :func:`compile_images` returns
  None, or :meth:`RowImages.applies` says no.
- Reading the rows consumes the event's row data: ``event.rows`` is not read after.

Packed rows (the stream's reader process, ``RowDecoder(packed=True)``; tests/test_binlog_decoder.py:
test_fast_images_equal_the_library, tests/test_stream.py): instead of its value tuples, a row event
of such a table map carries its row data as bytes (``PackedRows``) across the queue to the engine,
which decodes them as it unpickles them, with the same readers (compiled once per table map in its
own process: ``images_of``). Pickling per-row tuples of Python values, and unpickling them, cost
about as much as decoding them; bytes pickle for nothing.
- A packed event unpickles into the very list of value tuples the reader would have sent; a row
  event whose table map cdc_core/binlog/columnar.py reads unpickles into ``ColumnarRows``, scanned
  for its columns (an update's before and after images in turn), which to every other reader is a
  sequence of those same tuples (updates: pairs; decoded from the same bytes on first use;
  tests/test_columnar.py). Whether they are read as columns is decided per batch, by its rows
  (cdc_core/batch/table_batch.py: ``COLUMNAR_MIN_ROWS``).
- An image that fails to decode unpickles into ``Undecoded`` (the error's text) instead of a list;
  the engine's taker reports it as the reader would have (pipelines/stream/reader.py).
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from pymysqlreplication.constants import BINLOG
from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

from cdc_core.binlog.columnar import Layout, Scan, layout_of, scan
from cdc_core.errors import TerminalError
from cdc_core.types.codec import Reader, inline_of
from cdc_core.types.registry import table_map_codec


def _reader(col) -> Reader | None:
    """The reader of one table-map column, or None when the library must decode it."""
    if col.binlake_decode is not None or col.type != col.binlake_type or getattr(col, "compressed", False):
        return None  # a value a codec corrects after the library (prepared by cdc_core/binlog/columns.py)
    return table_map_codec(col).row_reader(col)


_SHAPE = ("name", "type", "unsigned", "max_length", "length_size", "size", "fsp", "precision", "decimals",
          "character_set_name", "enum_values", "set_values")


def column_key(col) -> tuple:
    """What decides a table-map column's decoding (its name, type and type parameters), hashable."""
    return tuple(tuple(v) if isinstance(v, list) else v for v in (getattr(col, a, None) for a in _SHAPE))


@dataclass(frozen=True)
class RowImages:
    """A table map's row-image decoder: the kept columns' values of each image, in table-map order.
    It pickles as its columns' keys and its table map's columns, themselves pickled once: where it is
    unpickled, ``images_of`` finds the decoder compiled for those keys, or unpickles the columns and
    compiles them again (a packed event's rows carry their decoder: most events find it compiled)."""

    readers: tuple[Reader, ...]
    keep: tuple[int, ...] | None  # indexes of the kept columns; None: all of them
    full: bytes  # a column bitmap naming every column (unused bits clear)
    mask: int  # ``full`` as an integer
    columns: tuple = field(compare=False)  # the table map's columns it was compiled from
    variants: dict = field(default_factory=dict, compare=False, repr=False)  # null bitmap -> image reader
    columnar: Layout | None = field(default=None, compare=False, repr=False)  # images as columns, if it can
    keys: tuple = field(default=(), compare=False, repr=False)  # column_key of each column

    def __reduce__(self):
        return images_of, (self.keys, self.keep, self._pickled_columns)

    @cached_property
    def _pickled_columns(self) -> bytes:
        return pickle.dumps(self.columns, pickle.HIGHEST_PROTOCOL)

    def applies(self, event) -> bool:
        """Whether ``event``'s images hold every column (binlog_row_image=FULL), as the readers expect
        (MySQL sets a bitmap's unused bits, MariaDB clears them: they do not count)."""
        if event.event_type == BINLOG.PARTIAL_UPDATE_ROWS_EVENT or not self._full(event.columns_present_bitmap):
            return False
        return not isinstance(event, UpdateRowsEvent) or self._full(event.columns_present_bitmap2)

    def _full(self, bitmap: bytes) -> bool:
        return bitmap == self.full or int.from_bytes(bitmap, "little") & self.mask == self.mask

    def rows(self, event) -> list:
        """The event's rows as value tuples (updates: (before, after) pairs); consumes its row data."""
        return self.decode(_row_data(event), isinstance(event, UpdateRowsEvent))

    def packed(self, event) -> PackedRows | list:
        """The event's rows undecoded, to be decoded where they are unpickled; consumes its row data."""
        buf = _row_data(event)
        if not buf:
            return []
        return PackedRows(self, buf, isinstance(event, UpdateRowsEvent), isinstance(event, WriteRowsEvent))

    def decode(self, buf: bytes, update: bool) -> list:
        """The rows of a row event's row data ``buf`` (updates: (before, after) pairs)."""
        pos, n, out = 0, len(buf), []
        width, variants, variant = len(self.full), self.variants, self._variant
        if update:
            while pos < n:
                nulls = buf[pos:pos + width]
                before, pos = (variants.get(nulls) or variant(nulls))(buf, pos + width)
                nulls = buf[pos:pos + width]
                after, pos = (variants.get(nulls) or variant(nulls))(buf, pos + width)
                out.append((before, after))
        else:
            append = out.append
            while pos < n:
                nulls = buf[pos:pos + width]
                row, pos = (variants.get(nulls) or variant(nulls))(buf, pos + width)
                append(row)
        return out

    def _variant(self, nulls: bytes) -> Callable[[bytes, int], tuple[tuple, int]]:
        """The image reader of images whose null bitmap is ``nulls`` (read from after it), made once
        per bitmap: generated code reading the non-NULL columns in turn, runs of fixed-size values
        unpacked by one ``struct`` call and strings sliced in place (the readers' :class:`Inline`),
        the other values by their readers. Beyond ``_VARIANTS_MAX`` bitmaps a table map's further
        ones loop over the readers (``_any_image``)."""
        if len(self.variants) >= _VARIANTS_MAX:
            return self._after_bitmap
        bits = int.from_bytes(nulls, "little")
        scope: dict[str, object] = {}
        body: list[str] = []
        run: list[tuple[int, str]] = []  # fixed-size values read by one unpack: (column, format)

        def unpack_run() -> None:
            if run:
                unpack = struct.Struct("<" + "".join(f.lstrip("<") for _, f in run))
                scope[f"s{run[0][0]}"] = unpack.unpack_from
                body.append(f"{''.join(f'v{i}, ' for i, _ in run)}= s{run[0][0]}(buf, pos)\npos += {unpack.size}")
                run.clear()

        for i, read in enumerate(self.readers):
            inline = inline_of(read)
            if bits >> i & 1:
                body.append(f"v{i} = None")
            elif inline is not None and inline.fmt.startswith("<"):
                run.append((i, inline.fmt))
            else:
                unpack_run()
                if inline is not None and inline.length_size in (1, 2):
                    scope[f"c{i}"] = inline.convert
                    size = "buf[pos]" if inline.length_size == 1 else "(buf[pos] | buf[pos + 1] << 8)"
                    body.append(f"end = pos + {inline.length_size} + {size}\n"
                                f"v{i} = c{i}(buf[pos + {inline.length_size}:end])\npos = end")
                else:
                    scope[f"r{i}"] = read
                    body.append(f"v{i}, pos = r{i}(buf, pos)")
        unpack_run()
        kept = range(len(self.readers)) if self.keep is None else self.keep
        source = ("def image(buf, pos):\n" + "".join(f"    {line}\n" for b in body for line in b.split("\n"))
                  + f"    return ({''.join(f'v{i}, ' for i in kept)}), pos\n")
        exec(source, scope)  # noqa: S102 - generated from column indexes and struct formats only, no input text
        image = self.variants[nulls] = scope["image"]
        return image

    def _after_bitmap(self, buf: bytes, pos: int) -> tuple[tuple, int]:
        return self._any_image(buf, pos - len(self.full))

    def _any_image(self, buf: bytes, pos: int) -> tuple[tuple, int]:
        readers = self.readers
        width = len(self.full)  # the null bitmap has a bit per column, as the column bitmap
        nulls = int.from_bytes(buf[pos:pos + width], "little")
        pos += width
        values = []
        append = values.append
        if nulls:
            for read in readers:
                if nulls & 1:
                    append(None)
                else:
                    v, pos = read(buf, pos)
                    append(v)
                nulls >>= 1
        else:
            for read in readers:
                v, pos = read(buf, pos)
                append(v)
        keep = self.keep
        return (tuple(values) if keep is None else tuple([values[i] for i in keep])), pos


def _row_data(event) -> bytes:
    """A complete row event's row data (its images), b"" for an incomplete one; consumes it."""
    if not event.complete:
        return b""
    packet = event.packet
    return bytes(packet.read(event.event_size - packet.read_bytes))


@dataclass(frozen=True, slots=True)
class Undecoded:
    """A packed event whose images failed to decode where they were unpickled: the error's text."""

    error: str


class PackedRows:
    """A row event's row data with its decoder: unpickles into its rows (see the module doc)."""

    __slots__ = ("images", "data", "update", "insert")

    def __init__(self, images: RowImages, data: bytes, update: bool, insert: bool = False):
        self.images = images
        self.data = data
        self.update = update
        self.insert = insert

    def __reduce__(self):
        return _unpacked, (self.images, self.data, self.update, self.insert)

    def decoded(self) -> list:
        """The rows, decoded here."""
        return self.images.decode(self.data, self.update)


class UndecodedRows(TerminalError):
    """A row event's images read as columns failed to decode as tuples where they were first asked
    for (the error the tuple path raised, and where it is known, the table and the event's position)."""


class ColumnarRows:
    """A row event's rows (``op``: c, u or d) scanned for columnar decoding where they were unpickled (``scan``,
    cdc_core/binlog/columnar.py: an update's images in turn, before then after), for
    cdc_core/batch/table_batch.py to read as columns with the rest of its batch; to every other reader a
    sequence of the very value tuples (updates: (before, after) pairs) the tuple path gives, decoded from
    the same bytes on first use (an event of fewer than ``DECODED_BELOW`` rows: as it is unpickled), or
    ``UndecodedRows``."""

    __slots__ = ("images", "data", "scan", "op", "_tuples")

    def __init__(self, images: RowImages, data: bytes, scanned: Scan, op: str = "c", tuples: list | None = None):
        self.images = images
        self.data = data
        self.scan = scanned
        self.op = op
        self._tuples = tuples

    def __reduce__(self):
        return _unpacked, (self.images, self.data, self.op == "u", self.op == "c")

    @property
    def decoded(self) -> bool:
        """Whether the tuples are decoded already."""
        return self._tuples is not None

    def tuples(self) -> list:
        """The rows as value tuples (the tuple path's, decoded once); ``UndecodedRows`` when they fail to decode."""
        if self._tuples is None:
            try:
                self._tuples = self.images.decode(self.data, self.op == "u")
            except Exception as e:
                raise UndecodedRows(f"{type(e).__name__}: {e}") from e
        return self._tuples

    def __len__(self) -> int:
        return self.scan.rows // 2 if self.op == "u" else self.scan.rows

    def __iter__(self):
        return iter(self.tuples())

    def __getitem__(self, i):
        return self.tuples()[i]

    def __eq__(self, other) -> bool:  # as the list it stands for
        return self.tuples() == (other.tuples() if isinstance(other, ColumnarRows) else other)

    __hash__ = None  # type: ignore[assignment] - a list is not hashable either


# An event of fewer rows read as columns is decoded as tuples as it is unpickled too: a decoding error is
# then the taker's to report, as for any other event (a live stream's single-row changes are most often
# folded as tuples; a batch of larger events is read as columns, its tuples never decoded).
DECODED_BELOW = 8


def _unpacked(images: RowImages, data: bytes, update: bool, insert: bool = False) -> list | ColumnarRows | Undecoded:
    try:
        if images.columnar is not None:
            per_row = 2 if update else 1  # an update's row is two images
            scanned = scan(images.columnar, data, per_row)
            if scanned is not None and scanned.rows % per_row == 0:
                tuples = images.decode(data, update) if scanned.rows < DECODED_BELOW * per_row else None
                return ColumnarRows(images, data, scanned, "u" if update else "c" if insert else "d", tuples)
        return images.decode(data, update)
    except Exception as e:  # noqa: BLE001 - reported by the taker, as the reader reports its errors
        return Undecoded(f"{type(e).__name__}: {e}")


_VARIANTS_MAX = 16  # null bitmaps per table map given generated code (each distinct pattern of NULLs is one;
# ~4 KiB each for a 20-column table: 16 bound 1,024 cached table maps to ~70 MiB at worst)

_COMPILED: dict[tuple, RowImages] = {}  # (column keys, keep) -> the decoder, in the process that unpickles
_COMPILED_MAX = 1024  # distinct table maps kept; forgotten all at once beyond (recompiled on use)


def images_of(keys: tuple, keep: tuple[int, ...] | None, pickled_columns: bytes) -> RowImages:
    """The decoder of the columns whose ``column_key`` are ``keys`` (``pickled_columns``, unpickled only
    to compile them) keeping ``keep``, compiled once per process (unpickling a ``RowImages``)."""
    hit = _COMPILED.get((keys, keep))
    if hit is None:
        if len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.clear()
        hit = _COMPILED[keys, keep] = compile_images(pickle.loads(pickled_columns), keep, keys)  # noqa: S301 - our own reader's bytes
    return hit


def compile_images(columns: list, keep: tuple[int, ...] | None, keys: tuple | None = None) -> RowImages | None:
    """The decoder of a table map's ``columns`` (prepared by binlog_columns.prepare; ``keys``: their
    ``column_key``, if known) keeping the columns at ``keep`` (None: all), or None when a column needs the
    library (see the module doc)."""
    readers = []
    for col in columns:
        r = _reader(col) if col.name else None
        if r is None:
            return None
        readers.append(r)
    n = len(columns)
    mask = (1 << n) - 1
    return RowImages(tuple(readers), keep, mask.to_bytes((n + 7) // 8, "little"), mask, tuple(columns),
                     columnar=layout_of(columns, tuple(readers), keep),
                     keys=keys if keys is not None else tuple(map(column_key, columns)))
