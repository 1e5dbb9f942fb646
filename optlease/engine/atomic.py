"""Atomic changes of the daemon's state: a change to the scheduler and its journal entry happen together, or the
daemon stops and answers no one.

A change that raises half-way, or whose journal entry cannot be written (a full disk, a read-only file), leaves the
scheduler in memory ahead of the disk. Retrying would serve a state no restart can rebuild, so the manager refuses
every caller from then on (one line, through its lock) and `serve` exits with that line; a restart replays the
journal, which holds every change before the failed one.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

from optlease.engine.persist import StoreError
from optlease.errors import InputError


class Stopped(InputError):
    """The manager stopped on an error: what it holds in memory may not be on disk, so it answers no one."""


class GuardedLock:
    """The manager's lock (re-entrant). Once the manager has stopped on an error, entering it raises Stopped, so
    that no caller is ever told a state that was not committed."""

    def __init__(self) -> None:
        self.raw = threading.RLock()
        self.refused: str | None = None

    def __enter__(self) -> None:
        self.raw.acquire()
        if self.refused is not None:
            self.raw.release()
            raise Stopped(f"the lease manager has stopped: {self.refused}")

    def __exit__(self, *exc) -> None:
        self.raw.release()


class Atomic:
    """The stop-on-error half of the Manager (a mixin: it needs `lock`, `log`, `stopping`, `wake`, `enact_wake`,
    `views`)."""

    @contextmanager
    def _atomic(self, what: str):
        """A change to the scheduler and its journal entry (lock held): both, or the manager stops. Once the
        outermost change is committed, what it touched is published to the API's readers."""
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            yield
            if self._depth == 1:
                self.views.publish()
        except Stopped:
            raise
        except StoreError as exc:
            self._die(f"{what}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a bug: memory may be ahead of the journal, so stop, never retry
            self._die(f"{what} failed: {type(exc).__name__}: {exc}")
        finally:
            self._depth -= 1

    def _die(self, why: str) -> None:
        """Stop on an error: refuse every caller from now on, and let `serve` exit with this one line."""
        why = why.replace("\n", " ")
        with self.lock.raw:
            if self.lock.refused is None:
                self.lock.refused = why
                self.fatal, self.fatal_rc = why, 1
                self.log.status("RM", f"stopping: {why}")
        self.stopping.set()
        self.wake.set()
        self.enact_wake.set()
        raise Stopped(why)
