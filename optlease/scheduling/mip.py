"""The round as a time-indexed MIP (pyomo + HiGHS): a cross-check of the CP-SAT model and an LP-relaxation bound."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import pyomo.environ as pe
from pyomo.contrib.appsi.base import TerminationCondition
from pyomo.contrib.appsi.solvers import Highs

from optlease.scheduling.cpsat.decode import lease_plan
from optlease.scheduling.cpsat.objective import TERM_NAMES
from optlease.scheduling.cpsat.prepare import Role, RoundData, prepare
from optlease.scheduling.snapshot import Plan, RoundSnapshot, RoundStats, Weights


@dataclass(frozen=True)
class MipResult:
    objective: float | None       # best plan's objective (the LP optimum when relaxed)
    bound: float | None           # the solver's proven lower bound
    optimal: bool
    plan: Plan | None             # None when relaxed or nothing was found
    stats: RoundStats


def solve_round_mip(snap: RoundSnapshot, weights: Weights = Weights(), lookahead: int | None = None,
                    relax: bool = False, time_limit: float = 60.0) -> MipResult:
    """Solve the round exactly as the CP-SAT model states it, one binary per start time; `relax` gives the LP
    relaxation, a valid lower bound on the optimum. For small rounds: tens of time steps, a few nodes and leases."""
    return solve_rounds_mip([snap], weights, lookahead, relax, time_limit)[0]


def solve_rounds_mip(snaps: Sequence[RoundSnapshot], weights: Weights = Weights(), lookahead: int | None = None,
                     relax: bool = False, time_limit: float = 60.0) -> list[MipResult]:
    """Solve several rounds. OR-Tools ships its own libhighs under the same name as highspy's, so once CP-SAT is
    loaded highspy cannot be: the rounds are then solved in one fresh worker process that never loads OR-Tools."""
    jobs = [(snap, weights, lookahead, relax, time_limit) for snap in snaps]
    if _highspy_loadable():
        return [_solve_one(*job) for job in jobs]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-m", "optlease.scheduling.mip"], input=pickle.dumps(jobs),
                          capture_output=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the MIP worker failed: {done.stderr.decode(errors='replace')[-2000:]}")
    return pickle.loads(done.stdout)


def _highspy_loadable() -> bool:
    try:
        import highspy  # noqa: F401
    except ImportError:
        return False
    return True


def _solve_one(snap: RoundSnapshot, weights: Weights, lookahead: int | None, relax: bool,
               time_limit: float) -> MipResult:
    data = prepare(snap, weights, lookahead)
    if not data.tails:   # nothing to decide: HiGHS would be handed an empty model
        plan = None if relax else Plan(tuple(lease_plan(j, data, False, None, (), None) for j in data.jobs))
        stats = RoundStats("OPTIMAL", 0, 0.0, 0.0, 0.0, 0, 0, source="lp" if relax else "mip")
        return MipResult(0.0, 0.0, True, plan, stats)
    m, modes = _build(data)
    opt = Highs()
    opt.config.time_limit = time_limit
    if relax:   # the appsi HiGHS interface ignores relax_integrality: relax the domains themselves
        for var in m.component_data_objects(pe.Var):
            var.domain = pe.UnitInterval
    opt.config.load_solution = False
    # objectives are whole numbers: a gap under 1 proves optimality
    opt.highs_options = {"mip_rel_gap": 0.0, "mip_abs_gap": 0.5, "random_seed": 0, "threads": 1}
    began = time.perf_counter()
    res = opt.solve(m)
    wall = time.perf_counter() - began
    optimal = res.termination_condition == TerminationCondition.optimal
    objective, bound = res.best_feasible_objective, res.best_objective_bound
    plan = None
    if objective is not None and not relax:
        res.solution_loader.load_vars()
        plan = _decode(data, m, modes)
    size = dict(num_variables=m.nvariables(), num_constraints=m.nconstraints())
    gap = None if objective is None or bound is None or objective == 0 else max(0.0, (objective - bound) / objective)
    stats = RoundStats(res.termination_condition.name.upper(), None if objective is None else round(objective),
                       bound, gap, wall, source="lp" if relax else "mip", **size)
    return MipResult(objective, bound, optimal, plan, stats)


def _build(data: RoundData):
    """Variables: placed[l], suspend_end[l,a], start_at[l,mode,t], vm_at[l,vm,node,mode,t]; time steps of 1 s."""
    now = data.now
    m = pe.ConcreteModel("optlease-round")
    tails = data.tails
    modes = {j.id: (tuple(j.suspend_ends) if j.role is Role.SUSPENDABLE else (None,)) for j in tails}

    def ready(job, mode):
        return mode if mode is not None else job.earliest

    def times(job, mode):
        if job.fixed_start is not None:
            return [job.fixed_start]
        last = data.horizon if job.latest is None else max(job.earliest, min(data.horizon, job.latest))
        return list(range(ready(job, mode), last + 1))

    def rem(job, mode):
        return job.rem_after(mode, now) if mode is not None else job.remaining

    y_idx = [(j.id, md, t) for j in tails for md in modes[j.id] for t in times(j, md)]
    z_idx = [(j.id, vm, n, md, t) for j in tails for vm, cands in enumerate(j.candidates) for n in cands
             for md in modes[j.id] for t in times(j, md) if t - j.migration_time(vm, n) >= ready(j, md)]
    s_idx = [(j.id, a) for j in tails for a in j.suspend_ends]
    m.placed = pe.Var([j.id for j in tails], domain=pe.Binary)
    m.suspend_end = pe.Var(s_idx, domain=pe.Binary)
    m.start_at = pe.Var(y_idx, domain=pe.Binary)
    m.vm_at = pe.Var(z_idx, domain=pe.Binary)
    m.cons = pe.ConstraintList()
    add = m.cons.add
    y_of = defaultdict(list)
    for (l, md, t) in y_idx:
        y_of[l, md].append((t, m.start_at[l, md, t]))
    z_of = defaultdict(list)
    for key in z_idx:
        z_of[key[0], key[1], key[3], key[4]].append(m.vm_at[key])
    sel = {j.id: {a: m.suspend_end[j.id, a] for a in j.suspend_ends} for j in tails}

    ars_at = defaultdict(list)
    for j in tails:
        if j.fixed_start is not None and j.kind.value == "ar":
            ars_at[j.fixed_start].append(j)
    for j in tails:
        placed = sum(y for md in modes[j.id] for _, y in y_of[j.id, md])
        add(m.placed[j.id] == placed)
        if not (j.optional or j.deferrable):
            add(m.placed[j.id] == 1)
        if j.role is Role.SUSPENDABLE:
            # at most one suspension, ending as an accepted AR starts (or at its free end); its resume comes after it
            add(sum(sel[j.id].values()) <= 1)
            for a in j.suspend_ends:
                add(sum(y for _, y in y_of[j.id, a]) <= sel[j.id][a])
                if a != j.free_end and not any(not ar.optional for ar in ars_at[a]):
                    add(sel[j.id][a] <= sum(m.placed[ar.id] for ar in ars_at[a]))
        # every VM of a placed tail is on exactly one node
        for md in modes[j.id]:
            for t, y in y_of[j.id, md]:
                for vm in range(j.numvms):
                    add(sum(z_of[j.id, vm, md, t]) == y)

    # capacity, at every second, on every node and resource
    use = defaultdict(list)          # (node, time) -> [(demand dict, coefficient expression)]
    fixed = defaultdict(lambda: defaultdict(int))
    for j in data.jobs:
        if j.role is Role.FIXED:
            for vm, n in enumerate(j.origin):
                for tau in range(now, now + j.remaining + j.shutdown):
                    for r, d in j.demand[vm].items():
                        fixed[n, tau][r] += d
        elif j.role is Role.SUSPENDABLE:
            full = now + j.remaining + j.shutdown
            for vm, n in enumerate(j.origin):
                for tau in range(now, full):
                    on = (1 - sum(sel[j.id].values())) + sum(v for a, v in sel[j.id].items() if tau < a)
                    use[n, tau].append((j.demand[vm], on))
    for (l, vm, n, md, t) in z_idx:
        j = data.job(l)
        for tau in range(t, t + j.resume + rem(j, md) + j.shutdown):   # an image's copy holds no node
            use[n, tau].append((j.demand[vm], m.vm_at[l, vm, n, md, t]))
    for (n, tau) in set(use) | set(fixed):
        for r in data.resource_types:
            terms = [d[r] * e for d, e in use.get((n, tau), ()) if d.get(r, 0) > 0]
            if terms:
                add(sum(terms) <= data.capacity[n].get(r, 0) - fixed[n, tau][r])

    # suspend and resume operations do not overlap, per node (local) or site-wide (global)
    ops = defaultdict(list)
    for j in tails:
        for a, v in sel[j.id].items():
            for tau in range(a - j.suspend, a):
                for n in ([None] if data.exclusion_global else sorted(set(j.origin))):
                    ops[n, tau].append(v)
        if j.resume <= 0:
            continue
        for md in modes[j.id]:
            for t, y in y_of[j.id, md]:
                if data.exclusion_global:
                    for tau in range(t, t + j.resume):
                        ops[None, tau].append(y)
                    continue
                for n in sorted({n for c in j.candidates for n in c}):
                    zs = [m.vm_at[j.id, vm, n, md, t] for vm in range(j.numvms) if (j.id, vm, n, md, t) in m.vm_at]
                    if not zs:
                        continue
                    w = pe.Var(domain=pe.UnitInterval)
                    m.add_component(f"resumes_on_{j.id}_{n}_{md}_{t}", w)
                    for z in zs:
                        add(w >= z)
                    for tau in range(t, t + j.resume):
                        ops[n, tau].append(w)
    for vs in ops.values():
        if len(vs) > 1:
            add(sum(vs) <= 1)

    m.obj = pe.Objective(expr=sum(getattr(data.weights, k) * e for k, e in _terms(data, m, modes, y_of, sel).items()),
                         sense=pe.minimize)
    return m, modes


def _terms(data, m, modes, y_of, sel) -> dict:
    now, late = data.now, data.horizon + 1
    out = {k: 0 for k in TERM_NAMES}
    for j in data.tails:
        placed = m.placed[j.id]
        if j.optional:
            out["rejected"] += j.value * (1 - placed)
        for md in modes[j.id]:
            rem = j.rem_after(md, now) if md is not None else j.remaining
            chosen = sel[j.id][md] if md is not None else 1
            started = sum(y for _, y in y_of[j.id, md])
            if j.best_effort:
                out["wait"] += j.weight * (sum((t + j.resume + rem - now) * y for t, y in y_of[j.id, md])
                                           + (late + j.resume + rem - now) * (chosen - started))
            out["overhead"] += j.resume * started
            if j.planned_start is not None and j.fixed_start is None:
                out["stability_time"] += (sum(abs(t - j.planned_start) * y for t, y in y_of[j.id, md])
                                          + abs(late - j.planned_start) * (chosen - started))
        if j.role is Role.SUSPENDABLE:
            suspended = sum(sel[j.id].values())
            out["preemptions"] += suspended
            out["overhead"] += j.suspend * suspended
            if j.best_effort:
                out["wait"] += j.weight * j.remaining * (1 - suspended)
        for (l, vm, n, md, t), z in m.vm_at.items():
            if l != j.id:
                continue
            if j.origin and n != j.origin[vm]:
                out["migrations"] += z
                out["overhead"] += j.migrate * z
        for vm, node in enumerate(j.planned_nodes[:j.numvms]):
            out["stability_nodes"] += 1 - sum(z for (l, v, n, _, _), z in m.vm_at.items()
                                              if l == j.id and v == vm and n == node)
    return out


def _decode(data: RoundData, m, modes) -> Plan:
    leases = []
    for j in data.jobs:
        if not j.has_tail:
            leases.append(lease_plan(j, data, False, None, (), None))
            continue
        ends = [a for a in j.suspend_ends if pe.value(m.suspend_end[j.id, a]) > 0.5]
        chosen = [(md, t) for (l, md, t), y in m.start_at.items() if l == j.id and pe.value(y) > 0.5]
        placed = bool(chosen)
        nodes = ()
        if placed:
            md, t = chosen[0]
            nodes = tuple(next(n for n in cands if (j.id, vm, n, md, t) in m.vm_at
                               and pe.value(m.vm_at[j.id, vm, n, md, t]) > 0.5)
                          for vm, cands in enumerate(j.candidates))
        leases.append(lease_plan(j, data, placed, chosen[0][1] if placed else None, nodes,
                                 ends[0] if ends else None))
    return Plan(tuple(leases))


# the worker: pickled (snapshot, weights, lookahead, relax, time limit) jobs in, results out
if __name__ == "__main__":
    from optlease.scheduling import mip   # results pickle by the module's name, not as __main__'s
    sys.stdout.buffer.write(pickle.dumps([mip._solve_one(*job) for job in pickle.loads(sys.stdin.buffer.read())]))
