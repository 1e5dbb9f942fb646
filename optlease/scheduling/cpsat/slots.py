"""The offline round on a site of interchangeable slots: every node alike and every VM of the workload with the same
demand, so that each node holds the same number `k` of VMs and the site is `k·|N|` slots. The round is then one
cumulative constraint over all slots, one interval per lease with its VM count as demand; nodes are assigned after
solving by a sweep in start order. Exact for such sites: unit-demand intervals whose total never exceeds the slot
count can always be laid on the slots one after another (interval graphs are perfect), and the per-node model states
the same plans with one node variable per VM and node. It is what makes a month of the Blue traces one model."""
from __future__ import annotations

import heapq
import time

from ortools.sat.python import cp_model

from optlease.scheduling.cpsat.prepare import Role, RoundData, prepare
from optlease.scheduling.snapshot import LeasePlan, Outcome, Phase, Plan, RoundSnapshot, RoundStats


def slots_per_node(snap: RoundSnapshot) -> int | None:
    """`k` when the snapshot is a slot site: nodes alike, one VM demand, and nothing running, suspended or pinned
    (a fresh offline round); None otherwise."""
    site = snap.site
    capacities = {tuple(sorted(site.capacity(n).items())) for n in site.node_ids}
    demands = {tuple(sorted(vm.items())) for lease in snap.leases for vm in lease.request.vms}
    if len(capacities) != 1 or len(demands) != 1:
        return None
    if any(lease.phase not in (Phase.NEW, Phase.QUEUED) or lease.pinned for lease in snap.leases):
        return None
    cap, demand = dict(next(iter(capacities))), dict(next(iter(demands)))
    k = min((cap.get(r, 0) // d for r, d in demand.items() if d > 0), default=0)
    return k if k >= 1 else None


def solve_slots(snap: RoundSnapshot, options, hint: Plan | None) -> Plan:
    """Solve the round as slots (see the module); the plan, with the same objective and stats as `solve_round`."""
    from optlease.scheduling.cpsat.objective import plan_cost

    k = slots_per_node(snap)
    if k is None:
        raise ValueError("not a slot site: nodes differ, VM demands differ, or leases are already placed")
    data = prepare(snap, options.weights, options.lookahead)
    m = cp_model.CpModel()
    nodes = sorted(data.nodes)
    start, present, intervals, demands, cost = {}, {}, [], [], []
    w = data.weights
    for job in data.tails:
        size = job.remaining + job.shutdown
        if job.fixed_start is None and job.earliest > data.horizon:
            continue   # cannot start within the look-ahead: deferred, as the per-node model defers it
        if job.fixed_start is not None:
            start[job.id] = job.fixed_start
        else:
            last = data.horizon if job.latest is None else max(job.earliest, min(data.horizon, job.latest))
            start[job.id] = m.new_int_var(job.earliest, last, f"start[lease={job.id}]")
        if job.optional:
            present[job.id] = m.new_bool_var(f"accepted[lease={job.id}]")
            intervals.append(m.new_optional_interval_var(start[job.id], size, start[job.id] + size, present[job.id],
                                                         f"run[lease={job.id}]"))
            cost.append(w.rejected * job.value * (1 - present[job.id]))
        else:   # best-effort: always placed (the automatic look-ahead leaves room for all, one after another)
            present[job.id] = 1
            intervals.append(m.new_interval_var(start[job.id], size, start[job.id] + size, f"run[lease={job.id}]"))
        demands.append(job.numvms)
        if job.best_effort:
            cost.append(w.wait * job.weight * (start[job.id] + job.remaining - data.now))
    m.add_cumulative(intervals, demands, k * len(nodes))
    m.minimize(sum(cost))
    hint_cost = None
    if hint is not None:
        hint_cost = plan_cost(data, hint)
        got = hint.by_id
        for job in data.tails:
            p = got.get(job.id)
            if job.id not in start:
                continue
            placed = p is not None and p.outcome is Outcome.ACCEPTED and p.start is not None
            if job.optional:
                m.add_hint(present[job.id], placed)
            if placed and not isinstance(start[job.id], int):
                m.add_hint(start[job.id], p.start)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = options.time_limit
    solver.parameters.num_workers = max(1, options.workers)
    solver.parameters.random_seed = options.seed
    wall = time.perf_counter()
    status = solver.solve(m)
    wall = time.perf_counter() - wall
    size = dict(num_variables=len(m.proto.variables), num_constraints=len(m.proto.constraints))
    name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if hint is None:
            raise RuntimeError(f"the slot model found no schedule in {options.time_limit:g} s ({name})")
        return Plan(hint.leases, RoundStats(f"HINT ({name})", hint_cost, None, None, wall, source="hint",
                                            hint_objective=hint_cost, **size))
    placed = {lease_id: solver.value(at) for lease_id, at in start.items()
              if isinstance(present[lease_id], int) or solver.value(present[lease_id])}
    plan = Plan(tuple(_assign(data, placed, k, nodes)))
    objective = plan_cost(data, plan)
    bound = solver.best_objective_bound
    if hint is not None and hint_cost < objective:   # the hint stands when the solver did not beat it
        return Plan(hint.leases, RoundStats(f"HINT ({name})", hint_cost, bound, None, wall, source="hint",
                                            hint_objective=hint_cost, **size))
    gap = 0.0 if objective == 0 else max(0.0, (objective - bound) / abs(objective))
    return Plan(plan.leases, RoundStats(name, objective, bound, gap, wall, hint_objective=hint_cost, **size))


def _assign(data: RoundData, starts: dict[int, int], k: int, nodes: list[int]) -> list[LeasePlan]:
    """Lay the placed leases on slots in start order (the lowest free slots first), then name each slot's node."""
    jobs = {job.id: job for job in data.jobs}
    free = list(range(k * len(nodes)))          # a heap of free slots
    busy: list[tuple[int, int]] = []            # (end, slot)
    out = []
    for lease_id in sorted(starts, key=lambda i: (starts[i], i)):
        job, at = jobs[lease_id], starts[lease_id]
        while busy and busy[0][0] <= at:
            heapq.heappush(free, heapq.heappop(busy)[1])
        taken = [heapq.heappop(free) for _ in range(job.numvms)]   # the cumulative guarantees there are enough
        for slot in taken:
            heapq.heappush(busy, (at + job.remaining + job.shutdown, slot))
        out.append(LeasePlan(lease_id, Outcome.ACCEPTED, start=at, nodes=tuple(nodes[s // k] for s in taken),
                             end=at + job.remaining))
    for job in data.jobs:
        if job.id in starts:
            continue
        if job.role is not Role.REJECTED and not job.optional:
            out.append(LeasePlan(job.id, Outcome.DEFERRED, reason="no room within the look-ahead"))
            continue
        reason = job.reason if job.role is Role.REJECTED else "no room for its reservation"
        out.append(LeasePlan(job.id, Outcome.REJECTED, reason=reason))
    return out
