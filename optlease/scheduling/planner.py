"""The one interface a scheduling round calls, and the registry of planners by name (`[scheduling] mapper`).

A planner decides one round: the leases the scheduler holds at `now` (its queue, its pending requests, its slot
table) in, the round's bookings, refusals and suspensions committed to the slot table out. The stepper (simulator
and daemon alike) holds one planner and calls it once per instant; nothing else plans.
"""
from __future__ import annotations

from typing import Callable, Protocol

from optlease.scheduling.leasesched import LeaseScheduler


class Planner(Protocol):
    name: str
    records: list      # one record per round: what it decided and the solver's statistics (greedy: none)
    admissions: list   # one per AR or immediate lease the greedy pass refused and the planner reconsidered

    def plan(self, now: int) -> None:
        """Decide the round at `now` and commit it to the scheduler's slot table."""


class GreedyPlanner:
    """Haizea's scheduler, line for line: admission, preemption for ARs, backfilling."""

    name = "greedy"

    def __init__(self, sched: LeaseScheduler) -> None:
        self.sched = sched
        self.records: list = []
        self.admissions: list = []

    def plan(self, now: int) -> None:
        self.sched.schedule(now)


def _cpsat(sched: LeaseScheduler) -> Planner:
    # imported here so that OR-Tools is loaded only by runs that plan with it
    from optlease.scheduling.cpsat_round import CpsatRound
    return CpsatRound(sched)


PLANNERS: dict[str, Callable[[LeaseScheduler], Planner]] = {"greedy": GreedyPlanner, "cpsat": _cpsat}


def make_planner(name: str, sched: LeaseScheduler) -> Planner:
    """The planner registered under `name` for this scheduler (the configuration has checked the name)."""
    return PLANNERS[name](sched)
