"""The round's window (cpsat.window): tails the hint starts later are held there, and the plan found is a plan of the
whole round, costed by the whole round's objective."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from optlease.scheduling.cpsat.decode import holding_plan
from optlease.scheduling.cpsat.objective import cost_difference, plan_cost
from optlease.scheduling.cpsat.prepare import Role, prepare
from optlease.scheduling.cpsat.solve import SolveOptions, solve_round
from optlease.scheduling.cpsat import window
from optlease.scheduling.cpsat.window import hold_outside
from optlease.scheduling.snapshot import Outcome
from test_cpsat_round import check_plan, random_round
from test_cpsat_fast_paths import random_plan
from test_cpsat_vs_mip import pooled_round

LOOKAHEAD = 12
FULL = SolveOptions(workers=1, time_limit=30, lookahead=LOOKAHEAD)
SNAPS = [("random", seed, lambda s: random_round(s, nodes=1 + s % 3, leases=4 + s % 4, span=6))
         for seed in range(3000, 3012)] + [("pooled", seed, pooled_round) for seed in range(2000, 2008)]


@pytest.mark.parametrize("kind,seed,make", SNAPS, ids=[f"{k}-{s}" for k, s, _ in SNAPS])
def test_held_tails_stay_where_the_hint_puts_them_and_the_plan_is_costed_whole(kind, seed, make, monkeypatch) \
        -> None:
    """The hint is the round's optimum found without a window; held at it from `now + 1` on (no line head: these
    rounds are shorter than it), the search keeps every later start, finds a safe plan, reports the whole round's
    cost of it, and cannot do better than the optimum."""
    monkeypatch.setattr(window, "LINE_HEAD", 0)
    snap = make(seed)
    data = prepare(snap, FULL.weights, LOOKAHEAD)
    best = solve_round(snap, FULL, None, data)
    assert best.stats.status == "OPTIMAL"
    held_data, held = hold_outside(data, best, 1)
    plan = solve_round(snap, replace(FULL, window=1), best, data)
    check_plan(snap, plan)
    assert plan.stats.held == held
    assert plan.stats.objective == plan_cost(data, plan) == best.stats.objective
    hint, got = best.by_id, plan.by_id
    for job in held_data.tails:
        if job.latest == job.earliest and not job.deferrable and data.job(job.id).deferrable:   # held
            assert got[job.id].outcome is Outcome.ACCEPTED and got[job.id].start == hint[job.id].start


def suspending_rounds(seeds):
    """The random rounds of these seeds that have a lease the round may suspend: (seed, snapshot, its data, the best
    plan that suspends nothing)."""
    from test_cpsat_vs_mip import round_of

    for seed in seeds:
        snap = round_of(seed)
        data = prepare(snap, FULL.weights, LOOKAHEAD)
        if not any(j.role is Role.SUSPENDABLE for j in data.jobs):
            continue
        runs_on = replace(data, jobs=tuple(replace(j, role=Role.FIXED, suspend_ends=(), free_end=None)
                                           if j.role is Role.SUSPENDABLE else j for j in data.jobs))
        yield seed, snap, data, solve_round(snap, FULL, None, runs_on)


def test_the_cost_the_window_leaves_out_is_costed_on_the_leases_it_replaced() -> None:
    """objective.cost_difference: a plan's whole-round cost less its neighbourhood cost, costed only on the leases
    the window replaced (held tails, suspendable leases that run on), is the difference of the two plan costs,
    for the hint and for other plans; on these rounds it is not always zero."""
    differ = 0
    for seed, snap, data, hint in suspending_rounds(range(1000, 1100)):
        for w in (0, 3):
            held_data, _ = hold_outside(data, hint, w)
            for plan in (hint, holding_plan(data), random_plan(data, random.Random(seed))):
                want = plan_cost(data, plan) - plan_cost(held_data, plan)
                assert cost_difference(data, held_data, plan) == want
                differ += want != 0
    assert differ > 0


def test_a_window_that_holds_nothing_is_the_whole_round() -> None:
    snap = random_round(3001, nodes=2, leases=5, span=6)
    data = prepare(snap, FULL.weights, LOOKAHEAD)
    best = solve_round(snap, FULL, None, data)
    same, held = hold_outside(data, best, LOOKAHEAD + 1)
    assert held == 0 and same is data


def test_the_window_holds_some_tails_on_pooled_rounds() -> None:
    """On pooled rounds whose optimum starts tails at several times (nothing there may be suspended, so there is no
    line head), a window of one second holds some of them."""
    held = 0
    for seed in range(2000, 2008):
        snap = pooled_round(seed)
        data = prepare(snap, FULL.weights, LOOKAHEAD)
        best = solve_round(snap, FULL, None, data)
        held += hold_outside(data, best, 1)[1]
    assert held > 0


def test_where_the_round_may_suspend_the_head_of_the_line_is_held_only_where_nothing_starts_it_sooner() -> None:
    """A short lease the hint starts late, behind a long running one, is what a suspension would start first
    (tests/test_round_suspensions.py shows one): where the round has a lease it may suspend, the first LINE_HEAD
    best-effort tails by run over weight stay free wherever the hint starts them, unless no plan of the
    neighbourhood can start one sooner (window._stuck): then it is held, and the model with it freed and asked
    to start it sooner has no solution."""
    from ortools.sat.python import cp_model

    from optlease.scheduling.cpsat.solve import build_round
    from test_cpsat_vs_mip import round_of

    free = stuck = 0
    for seed in range(1000, 1200, 2):   # ARs preempt everything, and running leases may be suspended for waiting ones
        snap = round_of(seed)
        data = prepare(snap, FULL.weights, LOOKAHEAD)
        if not any(j.role is Role.SUSPENDABLE for j in data.jobs):
            continue
        best = solve_round(snap, FULL, None, data)
        held_data, _ = hold_outside(data, best, 0)
        if not any(j.role is Role.SUSPENDABLE for j in held_data.jobs):
            continue   # every suspension idle (window._idle, tested below): the window holds as without them
        head = sorted((j for j in data.tails if j.best_effort),
                      key=lambda j: (j.remaining / max(1, j.weight), j.id))[:window.LINE_HEAD]
        for job in head:
            if held_data.job(job.id) == job:
                free += 1
                continue
            if job.role is Role.SUSPENDABLE:
                continue   # a suspension nothing could use: it runs on (tested below)
            stuck += 1
            freed = replace(held_data, jobs=tuple(job if j.id == job.id else j for j in held_data.jobs))
            rm, _ = build_round(freed)
            rm.model.add(rm.start[job.id] <= best.by_id[job.id].start - 1)
            rm.model.add(rm.present[job.id] == 1)
            solver = cp_model.CpSolver()
            solver.parameters.num_workers = 1
            assert solver.solve(rm.model) == cp_model.INFEASIBLE, (seed, job.id)
    assert free > 0 and stuck > 0


@pytest.mark.parametrize("kind,seed,make", SNAPS, ids=[f"{k}-{s}" for k, s, _ in SNAPS])
def test_a_held_vm_off_the_pools_keeps_only_the_hints_node(kind, seed, make, monkeypatch) -> None:
    """A held VM the hint puts on a node no pool holds has that node as its one candidate (one Boolean instead of
    one per node: on a site of one VM demand where every node holds a suspendable lease, no pool forms and a held
    VM had one per node); a held VM the hint puts in a pool keeps the pooled nodes among its candidates."""
    from optlease.scheduling.cpsat.pools import find_pools

    monkeypatch.setattr(window, "LINE_HEAD", 0)
    snap = make(seed)
    data = prepare(snap, FULL.weights, LOOKAHEAD)
    best = solve_round(snap, FULL, None, data)
    pooled = {n for p in find_pools(data, local_exclusion=not data.exclusion_global) for n in p.nodes}
    held_data, held = hold_outside(data, best, 1)
    hint = best.by_id
    for job in held_data.tails:
        before = data.job(job.id)
        if job == before:
            continue
        for vm, (node, cands) in enumerate(zip(hint[job.id].nodes, job.candidates)):
            if node in pooled:
                assert node in cands and set(cands) == set(before.candidates[vm]) & pooled
            else:
                assert cands == (node,)


def test_a_lease_whose_suspension_nothing_free_could_use_runs_on_and_loses_the_round_nothing() -> None:
    """Where the hint lets every suspendable lease run on (as the round's does), a lease whose nodes no free tail
    or lease to admit could use once its suspension is over is a fixed occupancy of the neighbourhood
    (window._idle): the neighbourhood's optimum is the same as with it free, the plan found never suspends it,
    and the round's stats cost the plan whole (its waiting, a constant there, added back)."""
    from ortools.sat.python import cp_model

    from optlease.scheduling.cpsat.solve import build_round

    def optimum(d) -> int:
        rm, objective = build_round(d)
        rm.model.minimize(objective)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        assert solver.solve(rm.model) == cp_model.OPTIMAL
        return round(solver.objective_value)

    idle_seen = 0
    for _, snap, data, hint in suspending_rounds(range(1000, 1200)):
        for w in (0, 3):
            held_data, _ = hold_outside(data, hint, w)
            idle = {j.id for j in data.jobs if j.role is Role.SUSPENDABLE and held_data.job(j.id).role is Role.FIXED}
            plan = solve_round(snap, replace(FULL, window=w), hint, data)
            check_plan(snap, plan)
            assert plan.stats.objective == plan_cost(data, plan) <= plan_cost(data, hint)
            assert plan.stats.best_bound <= plan.stats.objective
            assert all(plan.by_id[i].suspend_at is None for i in idle)
            if idle:
                idle_seen += 1
                freed = replace(held_data, jobs=tuple(data.job(j.id) if j.id in idle else j for j in held_data.jobs))
                constant = plan_cost(data, hint) - plan_cost(held_data, hint)
                assert optimum(held_data) + constant == optimum(freed)
    assert idle_seen > 0


def test_a_held_resume_the_hint_moves_off_its_images_keeps_the_copy_before_its_start() -> None:
    """A suspended lease the hint resumes after the window on other nodes than its images (the copy booked before
    the resume, as greedy books it) is held at the hint's start with its copy before it. Held with its start as
    the earliest its image may be copied from, the copy had no room and the round had no solution: on the Blue
    month, 418 of 1,059 searches kept the hint so."""
    from optlease.scheduling.snapshot import LeasePlan, Migration, Overheads, Phase, Plan, Policy, RoundSnapshot
    from test_cpsat_round import AR, BE, lease, site

    ov = Overheads(suspend=1, resume=1, migrate=2, shutdown=0)
    busy = lease(1, AR, Phase.RUNNING, 30, vms=2, start=-1, nodes=(1, 2), left=30)
    suspended = lease(2, BE, Phase.SUSPENDED, 20, vms=2, pre=True, ov=ov, nodes=(1, 2), left=8, ran=12)
    snap = RoundSnapshot(0, site(4), (busy, suspended), Policy(migration=Migration.YES, non_schedulable_interval=0,
                                                                threshold_factor=0))
    hint = Plan((LeasePlan(1, Outcome.ACCEPTED, nodes=(1, 2), end=30),
                 LeasePlan(2, Outcome.ACCEPTED, start=10, nodes=(3, 4), end=19, migrations=((1, 1, 3), (2, 2, 4)))))
    options = replace(FULL, lookahead=40, window=5)
    data = prepare(snap, options.weights, options.lookahead)
    held, count = hold_outside(data, hint, options.window)
    assert count == 1 and held.job(2).latest == 10 and held.job(2).earliest == 8
    plan = solve_round(snap, options, hint)
    check_plan(snap, plan)
    assert not plan.stats.status.startswith("HINT") and plan.stats.held == 1
    assert plan.of(2).start == 10 and sorted(plan.of(2).nodes) == [3, 4]
