"""Clocks that drive the per-instant step: the simulated clock skips to the next event, the real clock sleeps
until the next planned event, a new request (a `wake` event) or the wakeup interval, whichever comes first.

Both return the instant to step at, in whole simulated seconds from the run's origin. The real clock never skips
an event: when it is late (a restart after a crash, a slow round) it returns each missed event's own instant, so
a restarted daemon catches up exactly as the simulator would have run.
"""
from __future__ import annotations

import threading
import time


class SimulatedClock:
    """Time is whatever the next event says."""

    def __init__(self, start: int = 0) -> None:
        self.current = start

    def now(self) -> int:
        return self.current

    def advance(self, next_event: int | None, wake: threading.Event | None = None) -> int | None:
        if next_event is not None:
            self.current = next_event
        return next_event


class RealClock:
    """Wall-clock time since `epoch` (a Unix time), times `scale` (simulated seconds per real second)."""

    def __init__(self, epoch: float, scale: float = 1.0, wakeup: int = 60) -> None:
        self.epoch = epoch
        self.scale = scale
        self.wakeup = wakeup
        self.current = self.now()

    def now(self) -> int:
        return int((time.time() - self.epoch) * self.scale)

    def real_time(self, t: int) -> float:
        """The Unix time at which simulated instant t comes."""
        return self.epoch + t / self.scale

    def advance(self, next_event: int | None, wake: threading.Event | None = None) -> int:
        """Block until something may have happened; return the instant to step at (never after a planned event)."""
        now = self.now()
        if next_event is not None and next_event <= now:
            self.current = max(self.current, next_event)
            return self.current
        target = now + self.wakeup if next_event is None else min(next_event, now + self.wakeup)
        delay = max(0.0, self.real_time(target) - time.time())
        if wake is not None:
            if wake.wait(delay):
                wake.clear()
        else:
            time.sleep(delay)
        now = self.now()
        self.current = max(self.current, now if next_event is None else min(next_event, now))
        return self.current
