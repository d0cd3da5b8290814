"""MySQL/MariaDB lexical analysis for DDL statements read from the binlog, and a cursor
over the tokens for the DDL grammar (cdc_core/schema/statements.py, cdc_core/schema/column_def.py).

Rules (the MySQL and MariaDB manuals' "Identifiers", "String Literals", "Comments";
tests/test_ddl_parse.py):
- Comments ``#…``, ``-- …`` (a space or end after the dashes), ``/* … */`` are dropped;
  the body of an executable comment ``/*! … */``, ``/*!50100 … */`` or ``/*M!100301 … */``
  is code, as the server runs it.
- Identifiers: unquoted (letters, digits, ``_``, ``$``, any non-ASCII character; may start
  with a digit but are not all digits) or backtick-quoted (a doubled backtick is one).
  A quoted identifier is never a keyword.
- Strings: ``'…'`` or ``"…"`` (the default sql_mode: no ANSI_QUOTES) with a doubled quote
  or the backslash escapes; adjacent strings are one (``'a' 'b'``); a charset introducer
  (``_utf8mb4'x'``, ``N'x'``) is dropped. Hex (``x'41'``, ``0x41``) and bit (``b'101'``,
  ``0b101``) literals are their own kinds, holding the bytes they spell.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

WORD, IDENT, STRING, NUMBER, HEX, BIT, OP = "word", "ident", "string", "number", "hex", "bit", "op"

_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "%": "\\%", "_": "\\_"}
_SCAN = re.compile(r"""
    (?P<space>\s+)
  | (?P<line>(?:\#|--(?=[\s]|$))[^\n]*)
  | (?P<exec>/\*M?!\d*)
  | (?P<comment>/\*.*?\*/)
  | (?P<close>\*/)
  | (?P<xstr>[xX]'[0-9a-fA-F]*')
  | (?P<bstr>[bB]'[01]*')
  | (?P<intro>(?:_[A-Za-z0-9]+|[nN])(?=['"]))
  | (?P<quote>['"])
  | (?P<ident>`(?:[^`]|``)*`)
  | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w$\u0080-\uffff]))
  | (?P<word>[\w$\u0080-\uffff]+)
  | (?P<op><=>|<=|>=|<>|!=|:=|\|\||&&|<<|>>|[^\w\s])
""", re.VERBOSE | re.DOTALL)

_NEXT_STRING = re.compile(r"\s*(['\"])")


class SQLSyntaxError(ValueError):
    """Text that is not a MySQL token sequence (an unterminated string or comment)."""


@dataclass(frozen=True)
class Token:
    """One token: ``kind`` is one of WORD, IDENT, STRING, NUMBER, HEX, BIT, OP; ``text`` is
    the identifier, the string's value, the number's text or the operator; hex and bit
    literals keep their bytes in ``data``."""

    kind: str
    text: str
    data: bytes = b""

    @property
    def upper(self) -> str:
        """The keyword this token spells (only unquoted words are keywords)."""
        return self.text.upper() if self.kind == WORD else ""

    def is_name(self) -> bool:
        """Whether the token can name a column or table (any word, or a quoted identifier)."""
        return self.kind in (WORD, IDENT)


def _string(sql: str, i: int) -> tuple[str, int]:
    """The string literal starting at ``sql[i]`` (its quote) and the index after it."""
    q, out, j = sql[i], [], i + 1
    while j < len(sql):
        c = sql[j]
        if c == "\\" and j + 1 < len(sql):
            out.append(_ESCAPES.get(sql[j + 1], sql[j + 1]))
            j += 2
        elif c == q and sql[j + 1:j + 2] == q:
            out.append(q)
            j += 2
        elif c == q:
            return "".join(out), j + 1
        else:
            out.append(c)
            j += 1
    raise SQLSyntaxError("unterminated string")


def _bits(digits: str) -> bytes:
    n = int(digits or "0", 2)
    return n.to_bytes(max(1, (len(digits) + 7) // 8), "big") if digits else b""


def tokenize(sql: str) -> list[Token]:
    """The statement's tokens (see the module rules)."""
    return list(_tokens(sql))


def _tokens(sql: str) -> Iterator[Token]:
    i, n, executable = 0, len(sql), 0
    while i < n:
        m = _SCAN.match(sql, i)
        if m is None:
            raise SQLSyntaxError(f"unexpected character {sql[i]!r}")
        kind, text = m.lastgroup, m.group()
        i = m.end()
        if kind == "quote":
            value, i = _string(sql, m.start())
            while (m2 := _NEXT_STRING.match(sql, i)) is not None:  # 'a' 'b' is 'ab'
                more, i = _string(sql, m2.start(1))
                value += more
            yield Token(STRING, value)
        elif kind == "exec":
            executable += 1
        elif kind == "close":
            if not executable:
                raise SQLSyntaxError("'*/' outside a comment")
            executable -= 1
        elif kind == "xstr":
            yield Token(HEX, text, bytes.fromhex(text[2:-1]))
        elif kind == "bstr":
            yield Token(BIT, text, _bits(text[2:-1]))
        elif kind == "ident":
            yield Token(IDENT, text[1:-1].replace("``", "`"))
        elif kind == "num":
            yield Token(NUMBER, text)
        elif kind == "word":
            if re.fullmatch(r"0x[0-9a-fA-F]+", text):
                digits = text[2:]
                yield Token(HEX, text, bytes.fromhex(digits.rjust(len(digits) + len(digits) % 2, "0")))
            elif re.fullmatch(r"0b[01]+", text):
                yield Token(BIT, text, _bits(text[2:]))
            else:
                yield Token(WORD, text)
        elif kind == "op":
            if text == "/" and sql.startswith("*", i):
                raise SQLSyntaxError("unterminated comment")
            yield Token(OP, text)
        # space, line and comment (and a charset introducer before a string): nothing


class Cursor:
    """A position in a token list with the look-ahead the DDL grammar needs."""

    def __init__(self, tokens: list[Token], sql: str = ""):
        self.tokens = tokens
        self.sql = sql
        self.i = 0

    def peek(self, ahead: int = 0) -> Token | None:
        """The token ``ahead`` places from here, or None past the end."""
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def at_end(self) -> bool:
        """Whether every token is consumed (a trailing ``;`` counts as the end)."""
        rest = self.tokens[self.i:]
        return all(t.kind == OP and t.text == ";" for t in rest)

    def at(self, *words: str) -> bool:
        """Whether the next tokens are the keywords or operators ``words``."""
        for k, w in enumerate(words):
            t = self.peek(k)
            if t is None or (t.upper if t.kind == WORD else t.text if t.kind == OP else None) != w:
                return False
        return True

    def accept(self, *words: str) -> bool:
        """Consume ``words`` if they come next."""
        if self.at(*words):
            self.i += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        """Consume ``words`` or fail saying what came instead."""
        if not self.accept(*words):
            raise SQLSyntaxError(f"expected {' '.join(words)} {self.where()}")

    def next(self) -> Token:
        """Consume and return the next token."""
        t = self.peek()
        if t is None:
            raise SQLSyntaxError("unexpected end of statement")
        self.i += 1
        return t

    def name(self) -> str:
        """Consume an identifier."""
        t = self.peek()
        if t is None or not t.is_name():
            raise SQLSyntaxError(f"expected a name {self.where()}")
        self.i += 1
        return t.text

    def qualified_name(self) -> tuple[str | None, str]:
        """Consume ``name`` or ``db.name``: (database or None, name)."""
        first = self.name()
        if self.accept("."):
            return first, self.name()
        return None, first

    def skip_group(self) -> list[Token]:
        """Consume a parenthesised group (the next token is its ``(``) and return its inside."""
        self.expect("(")
        start, depth = self.i, 1
        while depth:
            t = self.next()
            if t.kind == OP and t.text == "(":
                depth += 1
            elif t.kind == OP and t.text == ")":
                depth -= 1
        return self.tokens[start:self.i - 1]

    def where(self) -> str:
        """Where the cursor is, for error messages."""
        t = self.peek()
        return f"near {t.text!r}" if t is not None else "at the end of the statement"


def split_top_level(tokens: list[Token]) -> list[list[Token]]:
    """``tokens`` split at the commas outside parentheses."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for t in tokens:
        if t.kind == OP and t.text == "(":
            depth += 1
        elif t.kind == OP and t.text == ")":
            depth -= 1
        if depth == 0 and t.kind == OP and t.text == ",":
            parts.append([])
        else:
            parts[-1].append(t)
    return parts
