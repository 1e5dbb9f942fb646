"""Offline optimization: the whole workload as one CP-SAT round, every request known in advance (its arrival still
respected: nothing starts before it arrives), each lease running its real duration. The result is a clairvoyant
reference (the best a scheduler could do knowing the future) with the solver's proven bound; the greedy schedule of
the same workload is the hint, so the answer is never worse than what greedy achieved on the leases it ran in one
piece."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from optlease.domain.site import Site
from optlease.scheduling.records import SHUTDOWN, VM, Held, Lease
from optlease.scheduling.snapshot import (Admission, Exclusion, LeasePlan, LeaseSnapshot, Outcome, Overheads, Phase,
                                          Plan, Policy, RoundSnapshot, RoundStats)


@dataclass
class OfflineResult:
    site: Site
    leases: list[Lease]           # scheduler records with the planned reservations (for the schedule file)
    stats: RoundStats
    deferred: list[int]           # best-effort leases the solver did not place (none when it had time enough)
    formulation: str = "per-node"  # "slots" on a site of interchangeable slots (cpsat/slots.py)


def offline_snapshot(site: Site, requests: list[LeaseRequest], opts) -> tuple[RoundSnapshot, list[LeaseRequest],
                                                                            dict[int, str]]:
    """The round at time 0 holding every request (durations cut to the real ones); and refusals known up front."""
    nsi = opts.non_schedulable_interval
    leases, real, refused = [], [], {}
    for req in sorted(requests, key=lambda r: r.id):
        req = dataclasses.replace(req, duration=req.actual_duration, real_duration=None)
        real.append(req)
        if req.kind is LeaseKind.AR and (req.start is None or req.start < req.arrival + nsi):
            refused[req.id] = "its start is too soon after its arrival to schedule"
            continue
        shutdown = req.numnodes * (opts.shutdown_time + opts.enactment_overhead)
        phase = Phase.QUEUED if req.kind is LeaseKind.BEST_EFFORT else Phase.NEW
        leases.append(LeaseSnapshot(req, phase, Overheads(shutdown=shutdown), release=req.arrival))
    # ARs were held to the interval above, at their arrival; best-effort and immediate leases start from theirs
    policy = Policy(exclusion=Exclusion(opts.exclusion), admission=Admission(opts.policy_admission),
                    non_schedulable_interval=0)
    return RoundSnapshot(0, site, tuple(leases), policy), real, refused


def greedy_hint(greedy_leases: list[Lease]) -> Plan:
    """The greedy schedule of the leases that ran in one piece, as a plan of the offline round."""
    plans = []
    for lease in greedy_leases:
        vms = [h for h in lease.held if h.kind == VM and h.outcome is None]
        if lease.state is LeaseState.DONE and len(vms) == 1 and not lease.preemptions:
            nodes = tuple(vms[0].mapping[v] for v in sorted(vms[0].mapping))
            plans.append(LeasePlan(lease.id, Outcome.ACCEPTED, start=vms[0].start, nodes=nodes, end=vms[0].end))
    return Plan(tuple(plans))


def optimize(site: Site, requests: list[LeaseRequest], opts, time_limit: float = 60.0, workers: int = 2,
             seed: int = 0, hint: Plan | None = None) -> OfflineResult:
    from optlease.scheduling.cpsat.slots import slots_per_node, solve_slots
    from optlease.scheduling.cpsat.solve import SolveOptions, solve_round
    from optlease.scheduling.slottable import SlotTable

    snap, real, refused = offline_snapshot(site, requests, opts)
    slots = slots_per_node(snap) is not None
    plan = (solve_slots if slots else solve_round)(snap, SolveOptions(time_limit=time_limit, workers=workers,
                                                                      seed=seed, weights=opts.weights), hint)
    table = SlotTable(site)
    got = plan.by_id
    leases, deferred = [], []
    for req in real:
        lease = Lease(req, {v: table.vector(d) for v, d in enumerate(req.vms, start=1)})
        p = got.get(req.id)
        if req.id in refused or p is None or p.outcome is Outcome.REJECTED:
            lease.state, lease.reason = LeaseState.REJECTED, refused.get(req.id) or (p.reason if p else "refused")
            lease.end = req.arrival
        elif p.outcome is Outcome.DEFERRED:
            lease.state = LeaseState.QUEUED
            deferred.append(req.id)
        else:
            mapping = {v: n for v, n in enumerate(p.nodes, start=1)}
            end = p.start + req.duration
            shutdown = snap.lease(req.id).overheads.shutdown
            lease.held = [Held(VM, p.start, end, dict(mapping)), Held(SHUTDOWN, end, end + shutdown, dict(mapping))]
            lease.state, lease.first_start, lease.end = LeaseState.DONE, p.start, end + shutdown
            lease.accumulated = req.duration
        leases.append(lease)
    return OfflineResult(site, leases, plan.stats, deferred, "slots" if slots else "per-node")
