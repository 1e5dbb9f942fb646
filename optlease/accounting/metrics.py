"""Per-run figures: what was accepted, how long best-effort leases waited, utilization, preemptions. Pure."""
from __future__ import annotations

from statistics import mean
from typing import Any

from optlease.domain.lease import LeaseKind, LeaseState
from optlease.domain.site import Site
from optlease.scheduling.records import VM, Lease

TAU = 10  # seconds: the bound of the bounded slowdown


def bounded_slowdown(lease: Lease, tau: int = TAU) -> float:
    run = lease.req.actual_duration
    return max(1.0, (lease.end - lease.req.arrival) / max(run, tau))


def run_summary(site: Site, leases: list[Lease], end_time: int) -> dict[str, Any]:
    def count(kind: LeaseKind, accepted: bool) -> int:
        return sum(1 for lease in leases if lease.kind is kind and (lease.state is not LeaseState.REJECTED) == accepted
                   and lease.state is not LeaseState.NEW)

    be = [lease for lease in leases if lease.kind is LeaseKind.BEST_EFFORT]
    be_done = [lease for lease in be if lease.state is LeaseState.DONE]
    waits = [lease.first_start - lease.req.arrival for lease in be if lease.first_start is not None]
    total_cpu = sum(site.capacity(n).get("CPU", 0) for n in site.node_ids)
    cpu_seconds = 0
    for lease in leases:
        vms = lease.req.vms
        alike = lease.req.alike()     # (most leases: one demand for every VM, counted once)
        for held in lease.held:
            if held.kind == VM:
                cpu = alike.get("CPU", 0) * len(held.mapping) if alike is not None else \
                    sum(vms[v - 1].get("CPU", 0) for v in held.mapping)
                cpu_seconds += (held.end - held.start) * cpu
    return {
        "leases": len(leases),
        "ar": {"accepted": count(LeaseKind.AR, True), "rejected": count(LeaseKind.AR, False)},
        "immediate": {"accepted": count(LeaseKind.IMMEDIATE, True), "rejected": count(LeaseKind.IMMEDIATE, False)},
        "best_effort": {
            "total": len(be), "completed": len(be_done), "rejected": count(LeaseKind.BEST_EFFORT, False),
            "all_completed_at": max((lease.end for lease in be_done), default=None)
            if len(be_done) == len([lease for lease in be if lease.state is not LeaseState.REJECTED]) else None,
            "wait_avg": mean(waits) if waits else None,
            "wait_max": max(waits) if waits else None,
            "bounded_slowdown_avg": mean(bounded_slowdown(lease) for lease in be_done) if be_done else None,
        },
        "cpu_utilization": cpu_seconds / (total_cpu * end_time) if end_time and total_cpu else 0.0,
        "preemptions": sum(lease.preemptions for lease in leases),
        "suspensions": sum(lease.suspensions for lease in leases),
        "migrations": sum(lease.migrations for lease in leases),
        "requeues": sum(lease.requeues for lease in leases),
        "end_time": end_time,
        "rejected": [{"id": lease.id, "type": lease.kind.value, "reason": lease.reason}
                     for lease in leases if lease.state is LeaseState.REJECTED],
    }


def lease_records(leases: list[Lease]) -> list[dict[str, Any]]:
    """Per-lease accounting, one row per lease (the data file's per-lease rows): what it asked for, when it started
    and ended, how long it waited (an AR: after its requested start), its bounded slowdown (leases that are not ARs,
    when done) and what preemption cost it. Times in seconds."""
    out = []
    for lease in leases:
        started = lease.first_start
        ready = lease.req.arrival if lease.req.start is None else lease.req.start
        out.append({
            "id": lease.id, "kind": lease.kind.value, "state": lease.state.value, "arrival": lease.req.arrival,
            "requested_start": lease.req.start, "first_start": started, "end": lease.end,
            "numnodes": lease.numnodes, "duration": lease.req.duration, "real_duration": lease.req.actual_duration,
            "waiting_time": None if started is None else started - ready,
            "bounded_slowdown": bounded_slowdown(lease)
            if lease.state is LeaseState.DONE and lease.kind is not LeaseKind.AR else None,
            "preemptions": lease.preemptions, "suspensions": lease.suspensions, "migrations": lease.migrations,
            "requeues": lease.requeues, "reason": lease.reason,
        })
    return out
