"""The CLI's tables drawn directly equal rich's rendering of them (pipelines/text_table.py)."""

from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipelines.text_table import render


def _rich(t: Table) -> str:
    f = io.StringIO()
    Console(file=f, width=1_000_000).print(t)
    return f.getvalue()


def _snapshot_like(rows: int, title: str | None = "snapshot of p (1.2s)") -> Table:
    t = Table(title=title)
    t.add_column("table", no_wrap=True, min_width=14)
    for col in ("chunks", "read now", "Delta rows", "check"):
        t.add_column(col, justify="right")
    t.add_column("note", no_wrap=True)
    for i in range(rows):
        t.add_row(f"db.t{i:04d}" + "x" * (i % 7), "streamed" if i % 5 == 0 else str(i), str(i * 3), f"{i * 1234567:,}",
                  "[green]match[/green]" if i % 3 else "[yellow]differs[/yellow]",
                  escape(f"[{i}, {i + 1}) a → b") if i % 2 else ":thumbs_up: 12:00:00" if i % 4 == 2 else "-")
    return t


def test_the_clis_tables_render_as_rich_renders_them():
    for t in (_snapshot_like(0), _snapshot_like(1), _snapshot_like(40), _snapshot_like(3, title=None),
              _snapshot_like(2, title="a title much wider than the table it heads, centred anyway")):
        assert render(t) == _rich(t)


def test_a_table_it_does_not_draw_is_left_to_rich():
    t = _snapshot_like(2)
    t.box = box.ROUNDED
    assert render(t) is None
    t = _snapshot_like(2)
    t.add_row(*(["x"] * 6), end_section=True)
    assert render(t) is None
