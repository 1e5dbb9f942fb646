"""The simulated clock: replays a workload through the lease scheduler, skipping from one event to the next.

Each instant runs the step shared with the daemon (optlease.engine.loop.Stepper); only the clock differs.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from optlease.accounting.collection import AccountingDataCollection
from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from optlease.domain.site import Site
from optlease.engine.clock import SimulatedClock
from optlease.eventlog import EventLog
from optlease.formats.lease_states import HAIZEA_CODE
from optlease.engine.loop import Stepper
from optlease.scheduling.leasesched import LeaseScheduler
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.records import AlikeVMs, Lease

@dataclass
class SimulationResult:
    site: Site
    leases: list[Lease]
    end_time: int
    wall_time: float
    options: SchedulingOptions
    rounds: int = 0
    round_records: list | None = None   # CpsatRound.records under `mapper: cpsat`
    admissions: list | None = None      # CpsatRound.admissions under `mapper: cpsat`
    notes: list[str] = field(default_factory=list)
    accounting: AccountingDataCollection | None = None   # the probes' data, stopped at the run's end
    images: Any = None   # scheduling.preparation.ImageTransfers under `lease-preparation: imagetransfer`


def kinds_breakdown(kinds: list[LeaseKind]) -> str:
    """`1 Best-effort + 1 AR`: counts per kind, in order of first appearance (Haizea's wording)."""
    counts: dict[LeaseKind, int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    return " + ".join(f"{n} {k.label}" for k, n in counts.items())


class Simulator:
    def __init__(self, site: Site, requests: list[LeaseRequest], opts: SchedulingOptions, policies: Policies,
                 log: EventLog, stop_when: str = "all-leases-done", status_interval: int | None = None,
                 accounting: AccountingDataCollection | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 observe: Callable[[int, LeaseScheduler], None] | None = None) -> None:
        self.site = site
        self.requests = sorted(requests, key=lambda r: r.arrival)
        self.opts = opts
        self.log = log
        self.stop_when = stop_when
        self.status_interval = status_interval
        self.sched = LeaseScheduler(site, opts, policies, log)
        vectors: dict[tuple, tuple] = {}   # a trace has few VM shapes: one usage vector each

        def vector(amounts: dict[str, int]) -> tuple:
            key = tuple(amounts.items())
            if key not in vectors:
                vectors[key] = self.sched.table.vector(amounts)
            return vectors[key]

        self.leases = [Lease(r, self._demands(r.vms, vector)) for r in self.requests]
        self.stepper = Stepper(self.sched)
        self.clock = SimulatedClock()
        self.accounting = accounting
        self.progress = progress   # told (requests arrived, requests in all) after each instant
        self.observe = observe     # shown (instant, scheduler) after each instant's step; it must not change it
        self._done_seen = 0        # how many of sched.finished the probes were told about
        # one past the last best-effort request in arrival order: best-effort requests are still to come before it
        self._last_be = max((i + 1 for i, lease in enumerate(self.leases) if lease.kind is LeaseKind.BEST_EFFORT),
                            default=0)

    @staticmethod
    def _demands(vms, vector) -> dict[int, tuple]:
        """vnode -> usage vector. VMs that ask alike (most often one dict, as the readers give them) take one vector
        in one step, not one lookup per VM."""
        if not vms:
            return {}
        first = vms[0]
        if vms.count(first) == len(vms):     # (one vector and a count: no entry per VM)
            return AlikeVMs(len(vms), vector(first))
        return {v: vector(d) for v, d in enumerate(vms, start=1)}

    def _done(self, next_arrival: int) -> bool:
        sched = self.sched
        more_requests = next_arrival < len(self.leases)
        if not sched.leases and not more_requests:
            return True
        if self.stop_when not in ("besteffort-submitted", "besteffort-done"):
            return False
        pending_be = next_arrival < self._last_be
        if self.stop_when == "besteffort-submitted":
            return not pending_be
        if self.stop_when == "besteffort-done":
            in_system = any(lease.kind is LeaseKind.BEST_EFFORT for lease in sched.leases.values())
            return not pending_be and not in_system
        return False

    def run(self) -> SimulationResult:
        wall = time.perf_counter()
        log, stepper, clock, leases = self.log, self.stepper, self.clock, self.leases
        log.status("CLOCK", "Starting simulated clock")
        now, i = clock.now(), 0
        last_status = 0
        if self.accounting is not None:
            self.accounting.start(now)
        while True:
            j = i
            while j < len(leases) and leases[j].req.arrival <= now:
                j += 1
            stepper.step(now, leases[i:j])
            if self.accounting is not None:
                self._account(now, leases[i:j])
            if self.progress is not None:
                self.progress(j, len(leases))
            if self.observe is not None:
                self.observe(now, self.sched)
            i = j
            if self.status_interval and now - last_status >= self.status_interval * 60:
                self.print_status()
                last_status = now
            if self._done(i):
                break
            nxt = stepper.next_event(now)
            if i < len(leases) and (nxt is None or leases[i].req.arrival < nxt):
                nxt = leases[i].req.arrival
            if nxt is None:
                raise RuntimeError(f"simulation is stuck at t={now}: leases remain but nothing will happen")
            now = clock.advance(nxt)
        log.status("CLOCK", "Simulated clock has stopped")
        if self.accounting is not None:
            self.accounting.stop(now)
        return SimulationResult(self.site, sorted(self.leases, key=lambda lease: lease.id), now,
                                time.perf_counter() - wall, self.opts, stepper.rounds, accounting=self.accounting,
                                images=self.sched.prep)

    def _account(self, now: int, arrivals: list[Lease]) -> None:
        """The probes' hooks after an instant's step, in Haizea's order: requests, leases done, the time step."""
        acct, finished = self.accounting, self.sched.finished
        acct.now = now
        for lease in arrivals:
            acct.at_lease_request(lease)
        for lease in finished[self._done_seen:]:
            acct.at_lease_done(lease)
        self._done_seen = len(finished)
        acct.at_timestep(self.sched)

    def print_status(self) -> None:
        """Haizea's status summary: leases by state, each with its kinds."""
        by_state: dict[LeaseState, list[LeaseKind]] = {}
        for lease in sorted(self.leases, key=lambda lease: lease.id):
            if lease.state is not LeaseState.NEW:
                by_state.setdefault(lease.state, []).append(lease.kind)
        self.log.status("RM", "--- Haizea status summary ---")
        total = 0
        for state in sorted(by_state, key=HAIZEA_CODE.__getitem__):   # Haizea's order: Rejected before Done
            kinds = by_state[state]
            label = state.value.replace("-", " ").capitalize() + ":"
            self.log.status("RM", f"{label:<20}{len(kinds):>6} ({kinds_breakdown(kinds)})")
            total += len(kinds)
        self.log.status("RM", " " * 20 + "------")
        self.log.status("RM", f"{'TOTAL:':>20}{total:>6}")
        self.log.status("RM", "---- End summary ----")
