"""Between plans and the CP-SAT model: read a solution back into a Plan, and hand a plan (the greedy one) as a hint."""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Callable

from optlease.domain.lease import LeaseKind
from optlease.scheduling.cpsat.prepare import Job, Role, RoundData, always
from optlease.scheduling.cpsat.transfers import decode_transfers
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
    in_pools = _pool_nodes(rm, value)
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
            counts = Counter({n: value(rm.vms_on_node[job.id, n][0]) for n in rm.split(job.candidates[0])[0]})
            counts.update(in_pools.get((job.id, -1), []))
            nodes = pooled_nodes(job, counts)
        else:
            nodes = tuple(in_pools[job.id, vm][0] if (job.id, vm) in in_pools else
                          next(n for n in rm.split(cands)[0] if value(rm.vm_to_node[job.id, vm, n]))
                          for vm, cands in enumerate(job.candidates))
        start = int(value(rm.start[job.id])) if placed else None
        leases.append(lease_plan(job, data, placed, start, nodes, ends[0] if ends else None))
    return decode_transfers(rm, value, Plan(tuple(leases)))


def _pool_nodes(rm: RoundModel, value: Value) -> dict[tuple[int, int], list[int]]:
    """The nodes of the VMs a solution starts in node pools, laid on the pools' slots in start order
    (`pools.assign`): per (lease, vm), or (lease, -1) for a pooled lease's count, one node per VM."""
    from optlease.scheduling.cpsat.pools import assign

    out: dict[tuple[int, int], list[int]] = {}
    for pool in rm.pools:
        tails = []
        for interval, count, lease, vm in rm.pool_holds[pool.index]:
            lit = rm.vm_to_pool[lease, vm, pool.index] if vm >= 0 else rm.vms_in_pool[lease, pool.index][1]
            if value(lit):
                k = value(count) if not isinstance(count, int) else count
                tails.append((value(interval.start_expr()), value(interval.end_expr()), k, (lease, vm)))
        for key, nodes in assign(pool, rm.data.now, tails).items():
            out.setdefault(key, []).extend(nodes)
    return out


def pooled_nodes(job: Job, counts: dict[int, int]) -> tuple[int, ...]:
    """Each VM's node from how many VMs go to each node: a VM keeps its image's node (a resume; so that no more
    VMs move than the counts make) or else its planned node, where one is chosen."""
    left = Counter({n: k for n, k in counts.items() if k})
    nodes: list[int | None] = [None] * job.numvms
    for vm, node in enumerate(job.origin or job.planned_nodes[:job.numvms]):
        if left[node] > 0:
            nodes[vm] = node
            left[node] -= 1
    rest = iter(sorted(left.elements()))
    return tuple(n if n is not None else next(rest) for n in nodes)


def add_hint(rm: RoundModel, plan: Plan) -> int:
    """Hint every decision the plan makes; returns how many leases it could hint (plans past the look-ahead or on
    nodes the model does not offer are hinted as deferred)."""
    model, data, got, hinted = rm.model, rm.data, plan.by_id, 0
    m = _Recorder(model)
    pool_keys = {*rm.vm_to_pool, *((lease, -1, pool) for lease, pool in rm.vms_in_pool)}
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
                  and all(n in rm.pool_of or ((job.id, n) in rm.vms_on_node if job.pooled
                                               else (job.id, vm, n) in rm.vm_to_node)
                          for vm, n in enumerate(p.nodes))
                  and all((job.id, -1 if job.pooled else vm, rm.pool_of[n]) in pool_keys
                          for vm, n in enumerate(p.nodes) if n in rm.pool_of))
        if not always(rm.present[job.id]):
            m.add_hint(rm.present[job.id], placed)
        if not isinstance(rm.start[job.id], int):   # a tail not placed starts, for the hint, at its earliest
            m.add_hint(rm.start[job.id], p.start if placed else job.earliest)
        if job.pooled:
            counts = Counter(p.nodes) if placed else Counter()
            for n in rm.split(job.candidates[0])[0]:
                count, used = rm.vms_on_node[job.id, n]
                m.add_hint(used, counts[n] > 0)
                if count is not used:
                    m.add_hint(count, counts[n])
            in_pool = Counter(rm.pool_of[n] for n in p.nodes if n in rm.pool_of) if placed else Counter()
            for pool in rm.split(job.candidates[0])[1]:
                count, used = rm.vms_in_pool[job.id, pool]
                m.add_hint(used, in_pool[pool] > 0)
                if count is not used:
                    m.add_hint(count, in_pool[pool])
            continue
        for vm, cands in enumerate(job.candidates):
            alone, pools = rm.split(cands)
            for n in alone:
                m.add_hint(rm.vm_to_node[job.id, vm, n], placed and p.nodes[vm] == n)
            for pool in pools:
                m.add_hint(rm.vm_to_pool[job.id, vm, pool], placed and rm.pool_of.get(p.nodes[vm]) == pool)
    for var, rule in rm.derived:
        try:
            m.add_hint(var, rule(m.value))
        except KeyError:   # it depends on a variable the plan left unhinted
            continue
    m.flush()
    return hinted


class _Recorder:
    """Adds hints to a model and remembers them, so that the helper variables' hints can be computed from them. The
    hints go into the model in one piece (`flush`), in the order given: the same model as one call per variable,
    without a Python call into the model per hinted variable (8,000 on the 5,000-node bench round)."""

    def __init__(self, model) -> None:
        from ortools.sat.python.cp_model_helper import FlatIntExpr, IntAffine, IntVar

        self.model, self.values = model, {}
        self.vars: list[int] = []
        self.hinted: list[int] = []
        self._kinds = FlatIntExpr, IntAffine, IntVar

    def add_hint(self, var, value) -> None:
        index = var.index
        if index in self.values:   # a variable standing for two things (a VM count that is its one literal)
            return
        value = int(value)
        if index >= 0:
            self.vars.append(index)
            self.hinted.append(value)
        else:   # a negated literal is hinted as its variable's opposite (as CpModel.add_hint does)
            self.vars.append(-index - 1)
            self.hinted.append(int(not value))
        self.values[index] = value

    def flush(self) -> None:
        """Write the hints given so far into the model (none: the model has no hint, as before any add_hint)."""
        if not self.vars:
            return
        hint = self.model.proto.solution_hint
        hint.vars.extend(self.vars)
        hint.values.extend(self.hinted)
        self.vars, self.hinted = [], []

    def value(self, expr) -> int:
        """The hinted value of a linear expression (KeyError: a variable in it has no hint). A variable, or a
        variable scaled and shifted, is read without flattening (most of the helper variables' rules read those:
        4,000 reads on the 5,000-node bench round)."""
        if isinstance(expr, int):
            return expr
        flat_expr, affine, variable = self._kinds
        kind = type(expr)
        if kind is variable:
            return self.values[expr.index]
        if kind is affine and type(expr.expression) is variable:
            return expr.coefficient * self.values[expr.expression.index] + expr.offset
        flat = flat_expr(expr)
        return flat.offset + sum(c * self.values[var.index] for var, c in zip(flat.vars, flat.coeffs))

