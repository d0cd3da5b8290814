"""Cron expressions as binlake's configuration accepts them (``dagster.backfills[].cron``):
five fields (minute, hour, day of month, month, day of week), each ``*`` or a comma list of
values, ranges ``a-b`` (``b`` below ``a`` wraps around: ``sat-sun``) and steps (``*/n``,
``a-b/n``, ``a/n``), months and days also by their English three-letter names; or one of
the macros ``@hourly``, ``@daily``, ``@midnight``, ``@weekly``, ``@monthly``, ``@yearly``,
``@annually``.

Invariant (tests/test_dagster_schedules.py): every expression accepted here is one
Dagster's schedules accept, so a configuration that loads never fails the code location
at its schedules. Dagster accepts a few forms more (``L``, ``W``, ``#``, ``?``): refused
here, named in the message.
"""

from __future__ import annotations

import re

MACROS = ("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (field name, lowest value, highest value, names of the values from the lowest on)
_FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
           ("month", 1, 12, _MONTHS), ("day of week", 0, 7, _DAYS))
_ITEM = re.compile(r"(?P<range>\*|(?P<lo>\w+)(?:-(?P<hi>\w+))?)(?:/(?P<step>\d+))?")


def _value(text: str, low: int, high: int, names: tuple[str, ...]) -> int:
    if text.lower() in names:
        return low + names.index(text.lower())
    if not text.isdigit() or not low <= int(text) <= high:
        raise ValueError(f"{text!r} is not {low}-{high}" + (f" or {names[0]}-{names[-1]}" if names else ""))
    return int(text)


def _values(field: str, low: int, high: int, names: tuple[str, ...]) -> set[int]:
    """The values a field's text stands for; ValueError naming what is wrong."""
    values: set[int] = set()
    for item in field.split(","):
        m = _ITEM.fullmatch(item)
        if m is None:
            raise ValueError(f"{item!r} is not a value, a range a-b or a step */n")
        lo = low if m["range"] == "*" else _value(m["lo"], low, high, names)
        hi = high if m["range"] == "*" or (m["hi"] is None and m["step"]) else (
            _value(m["hi"], low, high, names) if m["hi"] is not None else lo)
        step = int(m["step"]) if m["step"] is not None else 1
        if step == 0:
            raise ValueError(f"{item!r} has a step of 0")
        # A range whose end is below its start wraps around (as Dagster's croniter reads it).
        span = list(range(lo, hi + 1)) if lo <= hi else [*range(lo, high + 1), *range(low, hi + 1)]
        values.update(span[::step])
    return values


def cron_problem(expression: str) -> str | None:
    """Why ``expression`` is not a cron expression binlake accepts, or None."""
    if expression.strip().lower() in MACROS:
        return None
    fields = expression.split()
    if len(fields) != 5:
        return (f"{len(fields)} fields: a cron expression has 5 (minute hour day-of-month month day-of-week), "
                f"or is one of {', '.join(MACROS)}")
    found = []
    for text, (name, low, high, names) in zip(fields, _FIELDS):
        try:
            found.append(_values(text, low, high, names))
        except ValueError as e:
            return f"{name} field: {e}"
    days, months = found[2], found[3]
    if months == {2} and days <= {30, 31}:
        return "day of month: February has no 30th or 31st"
    return None
