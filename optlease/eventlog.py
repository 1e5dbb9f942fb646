"""Haizea's log: `[2006-11-25 13:00:00.00] LSCHED  message`, with its levels (VDEBUG < DEBUG < INFO < STATUS)."""
from __future__ import annotations

from datetime import datetime
from typing import TextIO

from optlease.formats.timefmt import format_time

LEVELS = {"VDEBUG": 5, "DEBUG": 10, "INFO": 20, "STATUS": 30}


class EventLog:
    """Writes log lines for the current simulated (or real) time; the driver moves `now`."""

    def __init__(self, origin: datetime, level: str = "INFO", out: TextIO | None = None) -> None:
        self.origin = origin
        self.threshold = LEVELS[level]
        self.out = out
        self.now = 0
        self.info_on = out is not None and self.threshold <= LEVELS["INFO"]
        self.debug_on = out is not None and self.threshold <= LEVELS["DEBUG"]

    def t(self, seconds: int) -> str:
        return format_time(self.origin, seconds)

    def write(self, level: str, component: str, message: str) -> None:
        if self.out is not None and LEVELS[level] >= self.threshold:
            self.out.write(f"[{format_time(self.origin, self.now)}] {component:<7} {message}\n")

    def info(self, component: str, message: str) -> None:
        if self.info_on:
            self.write("INFO", component, message)

    def debug(self, component: str, message: str) -> None:
        if self.debug_on:
            self.write("DEBUG", component, message)

    def status(self, component: str, message: str) -> None:
        self.write("STATUS", component, message)
