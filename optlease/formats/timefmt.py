"""Haizea's time and duration notations, read and written.

Durations: `HH:MM:SS`, `D:HH:MM:SS`, `+DD:HH:MM:SS`, each with optional fractional seconds (`1:00:12:23.00`).
Times: the same relative forms (seconds from an origin) or ISO `YYYY-MM-DD HH:MM:SS` / `YYYY-MM-DDTHH:MM:SS`.
Everything is whole seconds inside optlease; fractions are rounded up, as Haizea rounds its overheads.
"""
from __future__ import annotations

import math
import re
from datetime import datetime, timedelta

from optlease.errors import InputError


class TimeFormatError(InputError):
    """A time or duration string that cannot be read."""


# Times and durations past this are refused when read: nothing a lease manager plans runs for a century.
MAX_SECONDS = 100 * 365 * 86400


def check_seconds(seconds: float, text: str = "") -> None:
    if seconds > MAX_SECONDS:
        raise TimeFormatError(f"{text or seconds!r} is more than 100 years")


# [D:]HH:MM:SS[.ff] in ASCII digits: int() and float() would also take `1_0`, `+5`, `1e3` or Arabic-Indic digits.
_DURATION = re.compile(r"(?:([0-9]{1,9}):)?([0-9]{1,9}):([0-9]{1,9}):([0-9]{1,9}(?:\.[0-9]{1,9})?)", re.ASCII)


def parse_duration(text: str) -> int:
    """Seconds in a relative time or duration string."""
    match = _DURATION.fullmatch(text)       # (the form written most often: no sign, no spaces)
    if match is None:
        raw = text.strip()
        body = raw[1:] if raw.startswith("+") else raw
        if body.startswith("-"):
            raise TimeFormatError(f"{text!r}: a duration cannot be negative")
        match = _DURATION.fullmatch(body)
        if match is None:
            raise TimeFormatError(f"{_cut(text)!r} is not a duration of the form [D:]HH:MM:SS[.ff]")
    days, hours, minutes, secs = match.groups()
    minutes = int(minutes)
    if "." in secs:
        seconds = float(secs)
        whole = math.ceil(seconds - 1e-9)
    else:       # (at most 9 digits: the same as the float's)
        seconds = whole = int(secs)
    if minutes >= 60 or seconds >= 60:
        raise TimeFormatError(f"{text!r}: minutes and seconds must be below 60")
    total = (int(days) * 86400 if days else 0) + int(hours) * 3600 + minutes * 60 + whole
    check_seconds(total, text)
    return total


def _cut(text: str) -> str:
    return text if len(text) <= 40 else text[:36] + "..."


def parse_iso(text: str) -> datetime:
    raw = text.strip().replace("T", " ")
    if not raw.isascii():     # strptime's %Y would read other scripts' digits too
        raise TimeFormatError(f"{_cut(text)!r} is not an ISO timestamp (YYYY-MM-DD HH:MM:SS)")
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
        try:
            return datetime.strptime(raw, fmt)
        except ValueError:
            continue
    raise TimeFormatError(f"{text!r} is not an ISO timestamp (YYYY-MM-DD HH:MM:SS)")


def is_iso(text: str) -> bool:
    raw = text.strip()
    return len(raw) >= 10 and raw[4] == "-" and raw[7] == "-"


def parse_time(text: str, origin: datetime | None, relative_to: int = 0) -> int:
    """Seconds after `origin` for an ISO timestamp, or `relative_to` + a relative duration."""
    if is_iso(text):
        if origin is None:
            raise TimeFormatError(f"{text!r} is an absolute time, but no start time is known to relate it to")
        seconds = math.ceil((parse_iso(text) - origin).total_seconds())
        check_seconds(abs(seconds), text)
        return seconds
    raw = text.strip()
    if raw.startswith("-"):  # before the origin (Haizea writes ARs that start before the workload this way)
        return relative_to - parse_duration(raw[1:])
    return relative_to + parse_duration(raw)


def format_duration(seconds: int) -> str:
    """Haizea's TimeDelta notation: `01:00:00.00`, or `1:00:12:23.00` past a day."""
    sign = "-" if seconds < 0 else ""
    seconds = abs(int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    core = f"{hours:02d}:{minutes:02d}:{secs:02d}.00"
    return f"{sign}{days}:{core}" if days else f"{sign}{core}"


def instant(origin: datetime, seconds: int) -> datetime:
    """The date `seconds` after `origin`. Each lease and transfer is bounded, but a workload's add up: one past the
    calendar (years 1 to 9999) is bad input, said in one line rather than as an overflow."""
    try:
        return origin + timedelta(seconds=seconds)
    except OverflowError:
        raise InputError(f"the schedule reaches {seconds} s from {origin:%Y-%m-%d %H:%M:%S}, outside the years 1 to "
                         "9999: the workload's leases or image transfers take longer than a calendar holds") from None


def format_time(origin: datetime, seconds: int) -> str:
    """Haizea's log timestamp: `2006-11-25 13:00:00.00`."""
    return instant(origin, seconds).strftime("%Y-%m-%d %H:%M:%S") + ".00"


def iso(origin: datetime, seconds: int) -> str:
    """ISO 8601 without a zone, whole seconds (the schedule contract's notation)."""
    return instant(origin, seconds).strftime("%Y-%m-%dT%H:%M:%S")
