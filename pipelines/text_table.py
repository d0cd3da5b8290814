"""A rich ``Table`` as the text rich prints for it at an unbounded width (stdout not a terminal:
a log, a pipe), drawn directly: rich lays out and renders every cell as segments, which for a
snapshot of 2,000 tables costs more than a second of the command's time (bench/many_tables.py).

Invariants (tests/test_text_table.py):
- For the tables the CLI builds (string cells with markup, the default box and padding, columns
  left- or right-justified, a minimum width, a title), the text equals rich's own rendering
  character for character; any other table returns None (the caller lets rich print it).
"""

from __future__ import annotations

from rich import box
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text


def render(t: Table) -> str | None:
    """``t`` as rich prints it at an unbounded width, or None for a table this does not draw."""
    if not _simple(t):
        return None
    header = [_plain(c.header) for c in t.columns]
    rows = [[_plain(v) for v in c._cells] for c in t.columns]
    widths = [max([cell_len(header[i]), c.min_width or 0, *map(cell_len, rows[i])])
              for i, c in enumerate(t.columns)]
    b = box.HEAVY_HEAD

    def line(cells: list[str], left: str, sep: str, right: str) -> str:
        padded = [_justify(v, w, c.justify) for v, w, c in zip(cells, widths, t.columns)]
        return left + sep.join(f" {p} " for p in padded) + right

    def rule(left: str, fill: str, sep: str, right: str) -> str:
        return left + sep.join(fill * (w + 2) for w in widths) + right

    out = [rule(b.top_left, b.top, b.top_divider, b.top_right),
           line(header, b.head_left, b.head_vertical, b.head_right),
           rule(b.head_row_left, b.head_row_horizontal, b.head_row_cross, b.head_row_right)]
    out += [line([r[i] for r in rows], b.mid_left, b.mid_vertical, b.mid_right) for i in range(t.row_count)]
    out.append(rule(b.bottom_left, b.bottom, b.bottom_divider, b.bottom_right))
    if t.title:
        title, width = _plain(t.title), cell_len(out[0])
        left = (width - cell_len(title)) // 2
        out.insert(0, " " * left + title + " " * (width - left - cell_len(title)))
    return "\n".join(out) + "\n"


def _plain(markup: str) -> str:
    """The text ``markup`` shows (its tags, escapes and emoji codes resolved as rich does)."""
    return Text.from_markup(markup).plain if "[" in markup or ":" in markup else markup


def _justify(value: str, width: int, how: str) -> str:
    pad = width - cell_len(value)
    return " " * pad + value if how == "right" else value + " " * pad


def _simple(t: Table) -> bool:
    """Whether ``t`` uses only what :func:`render` draws (see the module invariants)."""
    return (t.box is box.HEAVY_HEAD and t.show_header and t.show_edge and not t.show_footer and not t.show_lines
            and t.padding == (0, 1, 0, 1) and not t.caption and isinstance(t.title, (str, type(None)))
            and not t.expand and t.width is None and t.min_width is None and not t.leading
            and all(isinstance(c.header, str) and c.justify in ("left", "right") and c.width is None
                    and c.max_width is None and c.ratio is None and all(isinstance(v, str) for v in c._cells)
                    for c in t.columns)
            and all(r.style is None and not r.end_section for r in t.rows))
