"""Haizea's accounting framework: the data collection that probes write into (per-lease stats, per-run stats and
counters with their running averages) and the base class of probes (the manual's chapter 10). Pure: the driver
tells it the time (`now`, seconds from the run's start) and calls its hooks; a probe that raises is named in one
line."""
from __future__ import annotations

from itertools import accumulate
from operator import mul, sub, truediv
from typing import Any, Callable

from optlease.errors import InputError

Value = float | int | str | None


class ProbeError(InputError):
    """A probe raised: the run stops, and the user sees which probe, in which hook, and what it said."""


class AccountingProbe:
    """Base class of probes: the constructor creates the stats and counters; each hook may collect data."""

    def __init__(self, accounting: "AccountingDataCollection") -> None:
        self.accounting = accounting

    def finalize_accounting(self) -> None:
        """When data collection stops (after the counters' averages are computed): set per-run stats here."""

    def at_timestep(self, lease_scheduler: Any) -> None:
        """Every time the scheduler wakes up (after the instant's step): `lease_scheduler` is optlease's
        LeaseScheduler (`queue`, `leases`, `site`, `table`)."""

    def at_lease_request(self, lease: Any) -> None:
        """After the instant at which the lease was requested was scheduled: its state says whether it was
        admitted (an AR or immediate lease not admitted is `rejected`)."""

    def at_lease_done(self, lease: Any) -> None:
        """When a lease is done: completed, rejected, cancelled or failed."""

    def _set_stat_from_counter(self, stat_id: str, counter_id: str) -> None:
        self.accounting.set_stat(stat_id, self.accounting.get_last_counter_value(counter_id))


class AccountingDataCollection:
    """What the probes of one run collect. Counter rows are [time, lease id, value] while running and
    (time, value, average) once stopped."""

    AVERAGE_NONE = "AVERAGE_NONE"
    AVERAGE_NORMAL = "AVERAGE_NORMAL"
    AVERAGE_TIMEWEIGHTED = "AVERAGE_TIMEWEIGHTED"

    def __init__(self) -> None:
        self.now = 0
        self.counters: dict[str, list] = {}
        self.counter_kinds: dict[str, str] = {}
        self.lease_stats_names: list[str] = []
        self.lease_stats: dict[int, dict[str, Value]] = {}
        self.stats_names: list[str] = []
        self.stats: dict[str, Value] = {}
        self.probes: list[tuple[str, AccountingProbe]] = []
        # hook -> (name, probe) for the probes whose hook is not the base class's (which does nothing): a run
        # calls the hooks at every instant
        self._hooks: dict[str, list[tuple[str, AccountingProbe]]] = {}
        self.stopped = False

    # -- what probes call ----------------------------------------------------------------------------------
    def create_counter(self, counter_id: str, avgtype: str) -> None:
        if avgtype not in (self.AVERAGE_NONE, self.AVERAGE_NORMAL, self.AVERAGE_TIMEWEIGHTED):
            raise ValueError(f"counter {counter_id!r}: unknown average type {avgtype!r}")
        self.counters[counter_id] = []
        self.counter_kinds[counter_id] = avgtype

    def create_lease_stat(self, stat_id: str) -> None:
        if stat_id not in self.lease_stats_names:
            self.lease_stats_names.append(stat_id)

    def create_stat(self, stat_id: str) -> None:
        if stat_id not in self.stats_names:
            self.stats_names.append(stat_id)

    def set_lease_stat(self, stat_id: str, lease_id: int, value: Value) -> None:
        if stat_id not in self.lease_stats_names:
            raise KeyError(f"per-lease stat {stat_id!r} was never created (create_lease_stat)")
        self.lease_stats.setdefault(lease_id, {})[stat_id] = value

    def set_stat(self, stat_id: str, value: Value) -> None:
        if stat_id not in self.stats_names:
            raise KeyError(f"per-run stat {stat_id!r} was never created (create_stat)")
        self.stats[stat_id] = value

    def incr_counter(self, counter_id: str, lease_id: int | None = None, amount: float = 1) -> None:
        self.append_to_counter(counter_id, self.get_last_counter_value(counter_id) + amount, lease_id)

    def decr_counter(self, counter_id: str, lease_id: int | None = None, amount: float = 1) -> None:
        self.append_to_counter(counter_id, self.get_last_counter_value(counter_id) - amount, lease_id)

    def append_to_counter(self, counter_id: str, value: float, lease_id: int | None = None) -> None:
        """The counter's value from now on. As Haizea does: a second value at the same instant replaces the first,
        and a row that repeats the previous one (same value, same lease) is not added."""
        if self.stopped:
            raise RuntimeError(f"counter {counter_id!r}: the run's accounting has stopped")
        rows = self.counters.get(counter_id)     # (`_counter`, inlined: probes append at every instant)
        if rows is None:
            rows = self._counter(counter_id)
        if rows and rows[-1][0] == self.now:
            rows[-1][2] = value
        elif not rows or rows[-1][1] != lease_id or rows[-1][2] != value:
            rows.append([self.now, lease_id, value])

    def get_last_counter_time(self, counter_id: str) -> int:
        return self._counter(counter_id)[-1][0]

    def get_last_counter_value(self, counter_id: str) -> float:
        """The counter's value now (0 for a counter created after the run started that has no row yet)."""
        rows = self._counter(counter_id)
        if not rows:
            return 0
        return rows[-1][1] if self.stopped else rows[-1][2]  # (time, value, average) once stopped

    def _counter(self, counter_id: str) -> list:
        if counter_id not in self.counters:
            raise KeyError(f"counter {counter_id!r} was never created (create_counter)")
        return self.counters[counter_id]

    # -- what the driver calls -----------------------------------------------------------------------------
    def add_probe(self, name: str, factory: Callable[["AccountingDataCollection"], AccountingProbe]) -> None:
        try:
            probe = factory(self)
        except Exception as exc:
            raise _probe_error(name, "its constructor", exc) from None
        if not isinstance(probe, AccountingProbe):
            raise ProbeError(f"{name} is not an accounting probe (a subclass of "
                             "optlease.accounting.collection.AccountingProbe)", "[accounting] probes")
        self.probes.append((name, probe))
        self._hooks.clear()

    def start(self, now: int = 0) -> None:
        """Every counter begins at zero at the run's start."""
        self.now = now
        for counter_id in self.counters:
            self.append_to_counter(counter_id, 0)

    def at_timestep(self, lease_scheduler: Any) -> None:
        self._each("at_timestep", lease_scheduler)

    def at_lease_request(self, lease: Any) -> None:
        self._each("at_lease_request", lease)

    def at_lease_done(self, lease: Any) -> None:
        self._each("at_lease_done", lease)

    def stop(self, now: int) -> None:
        """Close every counter at `now`, compute its averages, then let each probe finalize."""
        self.now = now
        for counter_id, rows in self.counters.items():
            if rows:
                self.append_to_counter(counter_id, rows[-1][2])
        for counter_id, rows in self.counters.items():
            self.counters[counter_id] = with_averages([(t, v) for t, _, v in rows], self.counter_kinds[counter_id])
        self.stopped = True
        self._each("finalize_accounting")

    def _each(self, hook: str, *args: Any) -> None:
        calls = self._hooks.get(hook)
        if calls is None:
            base = getattr(AccountingProbe, hook)
            # (each probe's hook bound once: a run calls them at every instant)
            calls = self._hooks[hook] = [(name, getattr(probe, hook)) for name, probe in self.probes
                                         if getattr(getattr(probe, hook), "__func__", None) is not base]
        for name, call in calls:
            try:
                call(*args)
            except Exception as exc:
                raise _probe_error(name, hook, exc) from None


def with_averages(rows: list[tuple[int, float]], kind: str) -> list[tuple[int, float, float | None]]:
    """(time, value, average) rows. AVERAGE_NORMAL: the mean of the values so far. AVERAGE_TIMEWEIGHTED: the mean
    over [first time, this time] of the value as a step function (each value holds until the next row), so the first
    row's average is its value. Times are seconds from the run's start; Haizea divides by that time rather than by
    the time since the first row, which is the same for counters begun at the start (every counter here)."""
    if kind == AccountingDataCollection.AVERAGE_NONE:
        return [(t, v, None) for t, v in rows]
    times = [t for t, _ in rows]
    values = [v for _, v in rows]
    # the running totals, added up in row order from 0.0 (the same sums, in the same order, as one loop over rows)
    if kind == AccountingDataCollection.AVERAGE_NORMAL:
        totals = accumulate(values, initial=0.0)
        next(totals)
        return list(zip(times, values, map(truediv, totals, range(1, len(rows) + 1))))
    # each value times how long it held, until the next row
    totals = accumulate(map(mul, values, map(sub, times[1:], times)), initial=0.0)
    first = times[0] if rows else 0
    return [(t, v, total / (t - first) if t != first else float(v)) for t, v, total in zip(times, values, totals)]


def _probe_error(name: str, hook: str, exc: BaseException) -> ProbeError:
    lines = str(exc).strip().splitlines()
    said = f": {lines[0][:200]}" if lines else ""
    return ProbeError(f"probe {name} failed in {hook} ({type(exc).__name__}{said})", "[accounting] probes")
