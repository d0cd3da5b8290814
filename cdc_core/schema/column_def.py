"""Column definitions of CREATE/ALTER TABLE (``data_type [attributes...]``) as the
server describes the column afterwards: a :class:`Column` as information_schema.COLUMNS
gives it, plus what decides the values existing rows take (DEFAULT, AUTO_INCREMENT,
generated).

Rules (the MariaDB/MySQL manuals' data type pages; checked against the server by
tests/test_ddl_corpus.py):
- Every type name and alias of MariaDB 10.11 and MySQL 8 maps to information_schema's
  DATA_TYPE: INTEGER/INT4 → int, INT1/BOOL/BOOLEAN → tinyint, INT2 → smallint,
  INT3/MIDDLEINT → mediumint, INT8 → bigint, DEC/NUMERIC/FIXED → decimal, REAL/DOUBLE
  PRECISION/FLOAT8 → double, FLOAT(p>24) → double, FLOAT4 → float, LONG/LONG VARCHAR →
  mediumtext, LONG VARBINARY → mediumblob, NATIONAL/NCHAR/NVARCHAR → char/varchar
  (utf8mb3), CHAR BYTE and CHARACTER SET binary → the binary types, TEXT(n)/BLOB(n) → the
  smallest text/blob type holding n characters/bytes, SERIAL → BIGINT UNSIGNED NOT NULL
  AUTO_INCREMENT UNIQUE; spatial types, INET4, INET6, UUID, VECTOR keep their names.
  (A data type's own aliases and its COLUMN_TYPE are its codec's: ``Codec.ddl_aliases``,
  ``Codec.declared_column`` in cdc_core/types/<family>.py; the syntax is parsed here.)
  JSON stays ``json`` (MariaDB describes it as longtext; both map to the same Arrow type).
- COLUMN_TYPE is MariaDB's spelling (display widths of integer types included);
  ZEROFILL implies UNSIGNED.
- A PRIMARY KEY column is NOT NULL; ``KEY`` alone in a column definition means
  PRIMARY KEY; SERIAL and ``SERIAL DEFAULT VALUE`` are NOT NULL.
- Assumed: ``explicit_defaults_for_timestamp=ON`` (MariaDB 10.10+ and MySQL 8's default),
  so a TIMESTAMP column is nullable unless it says NOT NULL, with no implicit DEFAULT.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation

from cdc_core.schema.sql_lexer import BIT, HEX, IDENT, NUMBER, OP, STRING, WORD, Cursor, SQLSyntaxError, Token, tokenize
from cdc_core.schema.table import Column
from cdc_core.types.codec import DeclaredType
from cdc_core.types.registry import codec_for_type, declared_name, declares

_SIZED_TEXT = (("tinytext", "tinyblob", 255), ("text", "blob", 65535), ("mediumtext", "mediumblob", 16777215),
               ("longtext", "longblob", 4294967295))
_MAXLEN = {"utf8mb4": 4, "utf8mb3": 3, "utf8": 3, "ucs2": 2, "utf16": 4, "utf16le": 4, "utf32": 4, "big5": 2,
           "gbk": 2, "gb2312": 2, "sjis": 2, "cp932": 2, "ujis": 3, "eucjpms": 3, "euckr": 2}
_BINARY_OF = {"char": "binary", "varchar": "varbinary", "tinytext": "tinyblob", "text": "blob",
              "mediumtext": "mediumblob", "longtext": "longblob"}
CURRENT_TIME_FUNCTIONS = {"CURRENT_TIMESTAMP", "NOW", "LOCALTIME", "LOCALTIMESTAMP", "CURRENT_DATE", "CURDATE",
                          "CURRENT_TIME", "CURTIME", "UTC_TIMESTAMP", "UTC_DATE", "UTC_TIME", "SYSDATE"}


@dataclass(frozen=True)
class DefaultValue:
    """A column's DEFAULT as written.

    kind: null | string | number | bytes (a hex or bit literal) | bool | expression (evaluated
    by the server: CURRENT_TIMESTAMP, UUID(), (a + 1)...; ``value`` is its text).
    """

    kind: str
    value: str | bytes | bool | None = None


@dataclass(frozen=True)
class ColumnDef:
    """One parsed column definition."""

    column: Column
    default: DefaultValue | None = None  # None: no DEFAULT clause
    primary_key: bool = False  # PRIMARY KEY (or KEY) in the definition
    auto_increment: bool = False
    generated: bool = False  # [GENERATED ALWAYS] AS (expr): computed by the server
    unique: bool = False  # UNIQUE [KEY] in the definition (SERIAL implies it)


@dataclass
class _Type:
    data_type: str
    args: list[str]
    members: list[str]
    unsigned: bool = False
    zerofill: bool = False
    charset: str | None = None
    collation: str | None = None
    binary_collation: bool = False
    national: bool = False


def column_from_def(name: str, type_sql: str, nullable: bool = True) -> Column:
    """A Column as information_schema would describe it, from a MySQL type text
    (``"DECIMAL(10,2) UNSIGNED"``, ``"varchar(20) CHARACTER SET latin1"``)."""
    cur = Cursor(tokenize(type_sql), type_sql)
    col = parse_column_def(cur, name).column
    if not cur.at_end():
        raise SQLSyntaxError(f"unexpected text in column type {type_sql!r} {cur.where()}")
    return replace(col, nullable=col.nullable and nullable)


def parse_column_def(cur: Cursor, name: str) -> ColumnDef:
    """Parse ``data_type [attribute ...]`` at the cursor; stops before a token that is not
    part of the definition (``,``, ``)``, FIRST, AFTER, the end)."""
    t = _parse_type(cur)
    nullable: bool | None = None
    default: DefaultValue | None = None
    primary = auto_increment = generated = serial = unique = False
    if t.data_type == "serial":
        t.data_type, t.unsigned, serial = "bigint", True, True
    while True:
        if cur.accept("NOT", "NULL"):
            nullable = False
        elif cur.accept("NULL"):
            nullable = True
        elif cur.accept("DEFAULT"):
            default = _parse_default(cur)
        elif cur.accept("SERIAL", "DEFAULT", "VALUE"):
            serial = True
        elif cur.accept("ON", "UPDATE"):
            _parse_default(cur)  # ON UPDATE CURRENT_TIMESTAMP: later writes only
        elif cur.accept("AUTO_INCREMENT"):
            auto_increment = True
        elif cur.accept("UNIQUE"):
            _ = cur.accept("KEY") or cur.accept("INDEX")
            unique = True
        elif cur.accept("PRIMARY", "KEY") or cur.accept("KEY"):
            primary = True
        elif cur.accept("COMMENT"):
            cur.accept("=")
            _string(cur)
        elif _type_attributes(cur, t):
            pass
        elif cur.accept("INVISIBLE") or cur.accept("VISIBLE"):
            pass
        elif cur.accept("COLUMN_FORMAT") or cur.accept("STORAGE"):
            cur.next()
        elif cur.at("GENERATED") or cur.at("AS"):
            cur.accept("GENERATED", "ALWAYS")
            cur.expect("AS")
            if cur.accept("ROW"):  # AS ROW START / END (system versioning)
                cur.next()
            else:
                cur.skip_group()
            generated = True
            _ = cur.accept("VIRTUAL") or cur.accept("STORED") or cur.accept("PERSISTENT")
        elif cur.accept("REFERENCES"):
            _skip_references(cur)
        elif cur.at("CONSTRAINT") or cur.at("CHECK"):
            if cur.accept("CONSTRAINT") and not cur.at("CHECK"):
                cur.name()
            cur.expect("CHECK")
            cur.skip_group()
            _ = cur.accept("NOT", "ENFORCED") or cur.accept("ENFORCED")
        elif cur.accept("WITH", "SYSTEM", "VERSIONING") or cur.accept("WITHOUT", "SYSTEM", "VERSIONING"):
            pass
        elif cur.accept("COMPRESSED"):
            if cur.accept("="):
                cur.next()
        elif cur.accept("SRID") or cur.accept("REF_SYSTEM_ID"):
            cur.accept("=")
            cur.next()
        elif cur.accept("ENGINE_ATTRIBUTE") or cur.accept("SECONDARY_ENGINE_ATTRIBUTE"):
            cur.accept("=")
            cur.next()
        elif _engine_option(cur):
            pass
        else:
            break
    if serial:
        nullable, auto_increment, unique = False, True, True
    if primary:
        nullable = False
    return ColumnDef(_column(name, t, nullable is not False), default, primary, auto_increment, generated, unique)


def _engine_option(cur: Cursor) -> bool:
    """An engine-defined column attribute (MariaDB: ``ENCRYPTED=YES``)."""
    t, eq = cur.peek(), cur.peek(1)
    if t is not None and t.kind == WORD and eq is not None and eq.kind == OP and eq.text == "=":
        cur.i += 2
        cur.next()
        return True
    return False


def _string(cur: Cursor) -> str:
    t = cur.next()
    if t.kind != STRING:
        raise SQLSyntaxError(f"expected a string, got {t.text!r}")
    return t.text


def _skip_references(cur: Cursor) -> None:
    cur.qualified_name()
    if cur.at("("):
        cur.skip_group()
    while True:
        if cur.accept("MATCH"):
            cur.next()
        elif cur.accept("ON"):
            cur.next()  # DELETE | UPDATE
            if not (cur.accept("SET", "NULL") or cur.accept("SET", "DEFAULT") or cur.accept("NO", "ACTION")):
                cur.next()  # RESTRICT | CASCADE
        else:
            return


def _parse_type(cur: Cursor) -> _Type:
    word = cur.next()
    if word.kind != WORD:
        raise SQLSyntaxError(f"expected a column type, got {word.text!r}")
    base = word.text.lower()
    national = False
    if base == "national":
        national, base = True, cur.next().text.lower()
    elif base in ("nchar", "nvarchar"):
        national, base = True, {"nchar": "char", "nvarchar": "varchar"}[base]
    if base == "double":
        cur.accept("PRECISION")
    elif base == "long":
        if cur.accept("VARBINARY"):
            base = "mediumblob"
        else:
            _ = cur.accept("VARCHAR") or cur.accept("VARCHARACTER") or cur.accept("CHAR", "VARYING")
            base = "mediumtext"
    base = declared_name(base)
    if base in ("char", "binary") and cur.accept("VARYING"):
        base = "var" + base
    elif base == "char" and cur.accept("VARCHAR"):  # NCHAR VARCHAR
        base = "varchar"
    if base in ("bool", "boolean"):
        return _Type("tinyint", ["1"], [])
    if base != "serial" and not declares(base):
        raise SQLSyntaxError(f"unknown column type {word.text!r}")
    args: list[str] = []
    members: list[str] = []
    if cur.at("("):
        inner = cur.skip_group()
        if codec_for_type(base).ddl_members:
            members = [t.text.rstrip(" ") for t in inner if t.kind == STRING]  # the server drops trailing spaces
        else:
            args = [t.text for t in inner if t.kind == NUMBER]
    t = _Type(base, args, members, national=national)
    _type_attributes(cur, t)
    return t


def _type_attributes(cur: Cursor, t: _Type) -> bool:
    """Consume UNSIGNED, SIGNED, ZEROFILL, CHARACTER SET, ASCII, UNICODE, BINARY, BYTE, COLLATE;
    whether there was any."""
    start = cur.i
    while True:
        if cur.accept("UNSIGNED"):
            t.unsigned = True
        elif cur.accept("SIGNED"):
            pass
        elif cur.accept("ZEROFILL"):
            t.unsigned = t.zerofill = True
        elif cur.accept("CHARACTER", "SET") or cur.accept("CHARSET"):
            cur.accept("=")
            t.charset = _charset_name(cur)
        elif cur.accept("ASCII"):
            t.charset = "latin1"
        elif cur.accept("UNICODE"):
            t.charset = "ucs2"
        elif cur.accept("BYTE"):
            t.charset = "binary"
        elif cur.accept("BINARY"):
            t.binary_collation = True
        elif cur.accept("COLLATE"):
            cur.accept("=")
            t.collation = _charset_name(cur)
        else:
            return cur.i > start


def _charset_name(cur: Cursor) -> str:
    tok = cur.next()
    if tok.kind not in (WORD, IDENT, STRING):
        raise SQLSyntaxError(f"expected a character set or collation, got {tok.text!r}")
    return tok.text.lower()


def _column(name: str, t: _Type, nullable: bool) -> Column:
    """The column a parsed type declares: the names and sizes the type's attributes imply
    resolved here, the rest its codec's (``Codec.declared_column``)."""
    base = t.data_type
    args = [int(a) for a in t.args if a.isdigit()]
    charset = "utf8mb3" if t.national and t.charset is None else t.charset
    if t.collation and charset is None:
        charset = t.collation.split("_", 1)[0]
    if base in _BINARY_OF and charset == "binary":
        base = _BINARY_OF[base]
    if base in ("text", "blob") and args:  # TEXT(n)/BLOB(n): the smallest type that holds n characters/bytes
        width = args[0] * (_MAXLEN.get(charset or "utf8mb4", 1) if base == "text" else 1)
        base = next(sized[base == "blob"] for sized in _SIZED_TEXT if width <= sized[2])
        args = []
    declared = DeclaredType(base, tuple(args), tuple(t.members), t.unsigned, t.zerofill, _collation(t, charset))
    return codec_for_type(base).declared_column(name, declared, nullable)


def _collation(t: _Type, charset: str | None) -> str | None:
    if t.collation:
        return t.collation
    if t.binary_collation and charset:
        return f"{charset}_bin"
    return None


# --- DEFAULT ----------------------------------------------------------------------------


def _parse_default(cur: Cursor) -> DefaultValue:
    """The DEFAULT (or ON UPDATE) value at the cursor."""
    t = cur.peek()
    if t is None:
        raise SQLSyntaxError("DEFAULT without a value")
    if t.kind == OP and t.text == "(":
        start = cur.i
        inner = cur.skip_group()
        folded = fold_constant(inner)
        return folded if folded is not None else DefaultValue("expression", _text(cur.tokens[start:cur.i]))
    if t.kind == OP and t.text in "+-":
        cur.next()
        num = cur.next()
        if num.kind != NUMBER:
            raise SQLSyntaxError(f"DEFAULT {t.text} must be followed by a number")
        return DefaultValue("number", num.text if t.text == "+" else "-" + num.text)
    if t.kind in (STRING, NUMBER, HEX, BIT):
        cur.next()
        return _literal(t)
    if t.upper == "NULL":
        cur.next()
        return DefaultValue("null")
    if t.upper in ("TRUE", "FALSE"):
        cur.next()
        return DefaultValue("bool", t.upper == "TRUE")
    if t.upper in ("DATE", "TIME", "TIMESTAMP") and (s := cur.peek(1)) is not None and s.kind == STRING:
        cur.i += 2
        return DefaultValue("string", s.text)
    if t.kind == WORD:  # a function (MariaDB takes them without parentheses): evaluated by the server
        start = cur.i
        if cur.accept("NEXT", "VALUE", "FOR"):
            cur.qualified_name()
        else:
            cur.next()
            if cur.at("."):
                cur.next()
                cur.next()
            if cur.at("("):
                cur.skip_group()
        return DefaultValue("expression", _text(cur.tokens[start:cur.i]))
    raise SQLSyntaxError(f"cannot read the DEFAULT {cur.where()}")


def _literal(t: Token) -> DefaultValue:
    if t.kind == STRING:
        return DefaultValue("string", t.text)
    if t.kind == NUMBER:
        return DefaultValue("number", t.text)
    return DefaultValue("bytes", t.data)


def _text(tokens: list[Token]) -> str:
    out = []
    for t in tokens:
        if t.kind == STRING:
            out.append("'" + t.text.replace("'", "''") + "'")
        elif t.kind == IDENT:
            out.append("`" + t.text.replace("`", "``") + "`")
        else:
            out.append(t.text)
    return " ".join(out).replace("( ", "(").replace(" )", ")").replace(" (", "(")


def fold_constant(tokens: list[Token]) -> DefaultValue | None:
    """The value of a parenthesised DEFAULT that is a constant: a literal, or + - * over
    numbers (exact decimal arithmetic, as MySQL does for exact literals); None otherwise."""
    if len(tokens) == 1 and tokens[0].kind in (STRING, NUMBER, HEX, BIT):
        return _literal(tokens[0])
    if len(tokens) == 1 and tokens[0].upper in ("TRUE", "FALSE", "NULL"):
        return DefaultValue("null") if tokens[0].upper == "NULL" else DefaultValue("bool", tokens[0].upper == "TRUE")
    if any(t.kind == NUMBER and ("e" in t.text.lower()) for t in tokens):
        return None  # approximate (double) arithmetic
    pos = 0

    def peek() -> Token | None:
        return tokens[pos] if pos < len(tokens) else None

    def factor() -> Decimal:
        nonlocal pos
        t = peek()
        if t is None:
            raise ValueError
        pos += 1
        if t.kind == OP and t.text in "+-":
            v = factor()
            return -v if t.text == "-" else v
        if t.kind == NUMBER:
            return Decimal(t.text)
        if t.kind == OP and t.text == "(":
            v = expr()
            if (c := peek()) is None or c.text != ")":
                raise ValueError
            pos += 1
            return v
        raise ValueError

    def term() -> Decimal:
        nonlocal pos
        v = factor()
        while (t := peek()) is not None and t.kind == OP and t.text == "*":
            pos += 1
            v *= factor()
        return v

    def expr() -> Decimal:
        nonlocal pos
        v = term()
        while (t := peek()) is not None and t.kind == OP and t.text in "+-":
            pos += 1
            v = v + term() if t.text == "+" else v - term()
        return v

    try:
        value = expr()
    except (ValueError, InvalidOperation):
        return None
    if pos != len(tokens):
        return None
    return DefaultValue("number", format(value, "f"))
