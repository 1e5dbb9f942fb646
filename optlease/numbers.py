"""The grammar of every number a user writes (lease XML, configuration, command line, resource strings).

Python's `int()` and `float()` read far more than users mean: `+5`, `1_0`, ` 7`, Arabic-Indic or superscript
digits, `1e308`, `nan`. Each of those has let a request skip a check made on the text it was written as, so
optlease reads numbers with one strict grammar: ASCII digits only, no sign, no underscores, a bounded length, and
(for decimals) an optional fraction and exponent. A refusal is a ValueError whose message says what was expected;
callers add the place.
"""
from __future__ import annotations

import math
import re

MAX_DIGITS = 40            # longer digit strings are refused unread (int() of a huge one is slow)
_WHOLE = re.compile(r"-?[0-9]{1,%d}" % MAX_DIGITS, re.ASCII)
_DECIMAL = re.compile(r"-?[0-9]{1,%d}(\.[0-9]{1,%d})?([eE]-?[0-9]{1,3})?" % (MAX_DIGITS, MAX_DIGITS), re.ASCII)


def parse_whole(text: str, low: int | None = 0, high: int | None = None) -> int:
    """A whole number written with ASCII digits only, within [low, high] (a minus sign is read only to say that
    the number is below the range)."""
    if not isinstance(text, str) or not _WHOLE.fullmatch(text):
        raise ValueError(f"{_shown(text)} is not a whole number (digits 0-9 only)")
    return in_range(int(text), low, high, text)


def parse_decimal(text: str, low: float | None = 0.0, high: float | None = None) -> float:
    """A decimal number (`2`, `0.5`, `1e-3`) within [low, high]."""
    if not isinstance(text, str) or not _DECIMAL.fullmatch(text):
        raise ValueError(f"{_shown(text)} is not a number (digits 0-9, an optional fraction and exponent)")
    value = float(text)
    if not math.isfinite(value):      # pragma: no cover - the grammar's bounded exponent keeps it finite
        raise ValueError(f"{_shown(text)} is not a finite number")
    return in_range(value, low, high, text)


def in_range(value, low, high, text: str | None = None):
    """`value` when low <= value <= high (None: no bound that side), else a ValueError naming the range."""
    if (low is None or low <= value) and (high is None or value <= high):
        return value
    low = float("-inf") if low is None else low
    allowed = f"allowed: {_num(low)} to {_num(high)}" if high is not None else f"at least {_num(low)}"
    if value > low:
        what = "is too large"
    elif value <= 0 < low:
        what = "must be positive"
    else:
        what = "must be zero or more" if low == 0 else "is too small"
    raise ValueError(f"{_cut(text) if text is not None else _num(value)} {what} ({allowed})")


def _num(value) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _cut(text: str) -> str:
    return text if len(text) <= 24 else text[:20] + "..."


def _shown(text) -> str:
    """The user's text, quoted and cut short (a refusal never echoes a megabyte back)."""
    return repr(_cut(str(text)))
