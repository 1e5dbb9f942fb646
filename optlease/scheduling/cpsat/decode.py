"""Between plans and the CP-SAT model: read a solution back into a Plan, and hand a plan (the greedy one) as a hint."""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Callable

from optlease.domain.lease import LeaseKind
from optlease.scheduling.cpsat.prepare import Job, Role, RoundData, always
from optlease.scheduling.snapshot import LeasePlan, Outcome, Plan

if TYPE_CHECKING:   # solver-free at run time: the MIP cross-check decodes with lease_plan in a process without OR-Tools
    from optlease.scheduling.cpsat.model import RoundModel

Value = Callable[[object], int]


def refusal(job: Job) -> str:
    """Why the round refused a lease it could have taken."""
    if job.kind is LeaseKind.IMMEDIATE:
        return "no room for it now"
    return "no room for its reservation without displacing what has priority"


def lease_plan(job: Job, data: RoundData, placed: bool, start: int | None, nodes: tuple[int, ...],
               suspend_end: int | None) -> LeasePlan:
    """One lease's plan from its decisions (shared by every decoder so that all write plans alike)."""
    now = data.now
    if job.role is Role.REJECTED:
        return LeasePlan(job.id, Outcome.REJECTED, reason=job.reason)
    if job.role is Role.FIXED or (job.role is Role.SUSPENDABLE and suspend_end is None):
        return LeasePlan(job.id, Outcome.ACCEPTED, nodes=job.origin, end=now + job.remaining)
    suspend_at = suspend_end - job.suspend if suspend_end is not None else None
    if not placed:
        if job.optional:
            return LeasePlan(job.id, Outcome.REJECTED, reason=refusal(job))
        return LeasePlan(job.id, Outcome.DEFERRED, reason="no room within the look-ahead", suspend_at=suspend_at)
    rem = job.rem_after(suspend_end, now) if suspend_end is not None else job.remaining
    moves = tuple((vm + 1, job.origin[vm], node) for vm, node in enumerate(nodes)
                  if job.origin and node != job.origin[vm])
    return LeasePlan(job.id, Outcome.ACCEPTED, start=start, nodes=nodes, end=start + job.resume + rem,
                     suspend_at=suspend_at, migrations=moves)


def holding_plan(data: RoundData) -> Plan:
    """The plan that changes nothing: running leases go on, planned ARs keep their nodes, new requests are refused
    and best-effort leases wait. Safe whenever the snapshot is; the hint and fallback when no greedy plan is given."""
    leases = []
    for job in data.jobs:
        keep = job.has_tail and job.fixed_start is not None and not job.optional \
            and len(job.planned_nodes) == job.numvms
        start = job.fixed_start if keep else None
        leases.append(lease_plan(job, data, keep, start, job.planned_nodes if keep else (), None))
    return Plan(tuple(leases))


def decode(rm: RoundModel, value: Value) -> Plan:
    """The plan of a CP-SAT solution; `value` reads a variable or expression from the solver."""
    data, leases = rm.data, []
    for job in data.jobs:
        if not job.has_tail:
            leases.append(lease_plan(job, data, False, None, (), None))
            continue
        present = rm.present[job.id]
        placed = always(present) or bool(value(present))
        ends = [a for a in job.suspend_ends if value(rm.suspend_end[job.id, a])]
        if not placed:
            nodes = ()
        elif job.pooled:
            nodes = pooled_nodes(job, {n: value(rm.vms_on_node[job.id, n][0]) for n in job.candidates[0]})
        else:
            nodes = tuple(next(n for n in cands if value(rm.vm_to_node[job.id, vm, n]))
                          for vm, cands in enumerate(job.candidates))
        start = int(value(rm.start[job.id])) if placed else None
        leases.append(lease_plan(job, data, placed, start, nodes, ends[0] if ends else None))
    return Plan(tuple(leases))


def pooled_nodes(job: Job, counts: dict[int, int]) -> tuple[int, ...]:
    """Each VM's node from how many VMs go to each node: a VM keeps its planned node where one is chosen."""
    left = Counter({n: k for n, k in counts.items() if k})
    nodes: list[int | None] = [None] * job.numvms
    for vm, node in enumerate(job.planned_nodes[:job.numvms]):
        if left[node] > 0:
            nodes[vm] = node
            left[node] -= 1
    rest = iter(sorted(left.elements()))
    return tuple(n if n is not None else next(rest) for n in nodes)


def add_hint(rm: RoundModel, plan: Plan) -> int:
    """Hint every decision the plan makes; returns how many leases it could hint (plans past the look-ahead or on
    nodes the model does not offer are hinted as deferred)."""
    m, data, got, hinted = rm.model, rm.data, plan.by_id, 0
    for job in data.tails:
        p = got.get(job.id)
        if p is None:
            continue
        hinted += 1
        suspend_end = p.suspend_at + job.suspend if p.suspend_at is not None else None
        for a in job.suspend_ends:
            m.add_hint(rm.suspend_end[job.id, a], a == suspend_end)
        if job.id in rm.suspended:
            m.add_hint(rm.suspended[job.id], suspend_end in job.suspend_ends)
        placed = (p.outcome is Outcome.ACCEPTED and p.start is not None
                  and (p.start <= data.horizon or p.start == job.fixed_start)
                  and len(p.nodes) == job.numvms
                  and all((job.id, n) in rm.vms_on_node if job.pooled else (job.id, vm, n) in rm.vm_to_node
                          for vm, n in enumerate(p.nodes)))
        if not always(rm.present[job.id]):
            m.add_hint(rm.present[job.id], placed)
        if placed and not isinstance(rm.start[job.id], int):
            m.add_hint(rm.start[job.id], p.start)
        if job.pooled:
            counts = Counter(p.nodes) if placed else Counter()
            for n in job.candidates[0]:
                count, used = rm.vms_on_node[job.id, n]
                m.add_hint(used, counts[n] > 0)
                if count is not used:
                    m.add_hint(count, counts[n])
            continue
        for vm, cands in enumerate(job.candidates):
            for n in cands:
                m.add_hint(rm.vm_to_node[job.id, vm, n], placed and p.nodes[vm] == n)
    return hinted
