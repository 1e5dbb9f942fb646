"""CP-SAT and the time-indexed pyomo/HiGHS MIP agree on the optimum of random small rounds; the LP bounds both."""
from __future__ import annotations

from dataclasses import replace

import pytest

from optlease.scheduling.cpsat.objective import plan_cost
from optlease.scheduling.cpsat.prepare import prepare
from optlease.scheduling.cpsat.solve import SolveOptions, solve_round
from optlease.scheduling.mip import solve_rounds_mip
from optlease.scheduling.snapshot import Preemption, Suspension, Weights
from test_cpsat_round import check_plan, random_round

LOOKAHEAD = 12
SEEDS = list(range(1000, 1036))   # 36 rounds: 1-3 nodes, 3-7 leases, every policy option drawn at random
# a slowdown of 600 s: these leases of a few seconds, all under the 10 s floor, weigh 60 per second of waiting (as
# a one-minute lease does under the default), so that waiting, preemptions and refusals still trade off here
OPTIONS = SolveOptions(workers=2, time_limit=30, lookahead=LOOKAHEAD, weights=Weights(slowdown=600))


def round_of(seed: int):
    """Every other round lets ARs preempt everything (so that suspensions are actually chosen), and every fourth
    one also lets running leases be suspended at once for waiting ones."""
    contended = seed % 2 == 0
    snap = random_round(seed, nodes=1 + (seed // 2) % (2 if contended else 3), leases=3 + seed % 5, span=6)
    if contended:
        snap = replace(snap, policy=replace(snap.policy, preemption=Preemption.AR_PREEMPTS_EVERYTHING,
                                            suspension=Suspension.ALL, threshold_factor=0,
                                            suspend_for_waiting=seed % 4 == 0))
    return snap


@pytest.fixture(scope="module")
def solved():
    """Every round solved three ways; the MIP and its LP relaxation in one batch (one HiGHS worker)."""
    snaps = [round_of(seed) for seed in SEEDS]
    cpsat = [solve_round(snap, OPTIONS) for snap in snaps]
    mip = solve_rounds_mip(snaps, OPTIONS.weights, lookahead=LOOKAHEAD)
    lp = solve_rounds_mip(snaps, OPTIONS.weights, lookahead=LOOKAHEAD, relax=True)
    return dict(zip(SEEDS, zip(snaps, cpsat, mip, lp)))


@pytest.mark.parametrize("seed", SEEDS, ids=[f"round-{s}" for s in SEEDS])
def test_cpsat_and_mip_agree_on_the_optimum(solved, seed: int) -> None:
    snap, plan, mip, lp = solved[seed]
    assert plan.stats.status == "OPTIMAL" and mip.optimal
    assert plan.stats.objective == round(mip.objective)
    # the MIP's plan is a plan of the same round: safe, and worth what the MIP says
    check_plan(snap, mip.plan)
    assert plan_cost(prepare(snap, OPTIONS.weights, LOOKAHEAD), mip.plan) == plan.stats.objective


@pytest.mark.parametrize("seed", SEEDS, ids=[f"round-{s}" for s in SEEDS])
def test_lp_relaxation_is_a_valid_bound(solved, seed: int) -> None:
    _, plan, mip, lp = solved[seed]
    assert lp.optimal and lp.plan is None
    assert lp.objective <= mip.objective + 1e-6
    assert lp.objective <= plan.stats.objective + 1e-6


def test_the_rounds_exercise_every_kind_of_decision(solved) -> None:
    """The random rounds are not all trivial: some suspend, migrate, refuse, defer, and some have a fractional LP."""
    plans = [p for _, p, _, _ in solved.values()]
    outcomes = {lp.outcome.value for p in plans for lp in p.leases}
    assert {"accepted", "rejected", "deferred"} <= outcomes
    assert sum(lp.suspend_at is not None for p in plans for lp in p.leases) >= 3
    assert any(lp.suspend_at == snap.now + snap.policy.non_schedulable_interval and snap.policy.suspend_for_waiting
               for snap, p, _, _ in solved.values() for lp in p.leases), "a lease suspended at once for waiting ones"
    assert any(lp.migrations for p in plans for lp in p.leases)
    assert any(lp.start is not None and lp.start > 1 for p in plans for lp in p.leases)
    assert any(lp.objective < mip.objective - 1e-6 for _, _, mip, lp in solved.values())


POOLED_SEEDS = list(range(2000, 2008))


def pooled_round(seed: int):
    """A round whose nodes pool (cpsat.pools): 2-4 alike nodes of two VM slots, each held by running leases that end
    at their own times (a staircase of slots), best-effort leases of one to three VMs of one demand queued, and an
    AR to admit or refuse."""
    import random

    from test_cpsat_round import AR, BE, POLICY, lease, site
    from optlease.scheduling.snapshot import Phase, RoundSnapshot

    rng = random.Random(seed)
    nodes = rng.randint(2, 4)
    leases, next_id = [], 1
    for node in range(1, nodes + 1):
        for _ in range(rng.randint(0, 2)):
            leases.append(lease(next_id, AR, Phase.RUNNING, rng.randint(1, 8), start=0, nodes=(node,)))
            next_id += 1
    for _ in range(rng.randint(3, 5)):
        leases.append(lease(next_id, BE, Phase.QUEUED, rng.randint(1, 5), vms=rng.randint(1, 3),
                            arrival=-rng.randint(0, 2) * 1800))
        next_id += 1
    leases.append(lease(next_id, AR, Phase.NEW, rng.randint(1, 4), vms=rng.randint(1, 2 * nodes),
                        start=rng.randint(1, 6)))
    return RoundSnapshot(0, site(nodes, {"CPU": 200, "Memory": 2048}), tuple(leases), POLICY)


def test_pooled_rounds_agree_with_the_mip() -> None:
    """Node pools are exact: on rounds where every node is pooled (one cumulative over the VM slots, no per-node
    choice), CP-SAT's optimum equals the per-node, time-indexed MIP's, and its plan, laid on nodes by
    `pools.assign`, is safe."""
    from optlease.scheduling.cpsat.model import build_variables

    snaps = [pooled_round(seed) for seed in POOLED_SEEDS]
    for snap in snaps:
        rm = build_variables(prepare(snap, OPTIONS.weights, LOOKAHEAD))
        assert rm.pools and not rm.vm_to_node and not rm.vms_on_node   # every tail goes to a pool
    mips = solve_rounds_mip(snaps, OPTIONS.weights, lookahead=LOOKAHEAD)
    for snap, mip in zip(snaps, mips):
        plan = solve_round(snap, OPTIONS)
        check_plan(snap, plan)
        assert plan.stats.status == "OPTIMAL" and mip.optimal
        assert plan.stats.objective == round(mip.objective)


COUNTED_SEEDS = list(range(3000, 3008))


def counted_resume_round(seed: int):
    """A round of resumes the model counts per node (cpsat.prepare, `Job.pooled` with images): 2-3 nodes of two VM
    slots; a running preemptible lease of 2-3 alike VMs spread over them that the round may suspend at once for
    waiting ones; a suspended lease of 2-3 VMs with its images spread (in one round out of two with its resume
    planned where its images are); short leases queued; migration with a copy time, exclusion drawn."""
    import random

    from test_cpsat_round import BE, HALF, lease, site
    from optlease.scheduling.snapshot import Exclusion, Migration, Overheads, Phase, Policy, RoundSnapshot

    rng = random.Random(seed)
    nodes = rng.randint(2, 3)
    ov = Overheads(suspend=1, resume=1, migrate=rng.randint(1, 2), shutdown=0)
    running_vms = rng.randint(2, 3)
    running = lease(1, BE, Phase.RUNNING, 12, vms=running_vms, pre=True, vm=HALF, ov=ov, left=rng.randint(6, 10),
                    since=-5, nodes=tuple(rng.sample(range(1, nodes + 1), k=running_vms) if running_vms <= nodes
                                          else (1, 1, 2)), arrival=-3600)
    images = tuple(rng.randint(1, nodes) for _ in range(rng.randint(2, 3)))
    planned = dict(planned_start=rng.randint(2, 6), planned_nodes=images) if seed % 2 else {}
    suspended = lease(2, BE, Phase.SUSPENDED, 8, vms=len(images), pre=True, vm=HALF, ov=ov, nodes=images,
                      left=rng.randint(2, 5), ran=3, arrival=-7200, **planned)
    queued = [lease(3 + i, BE, Phase.QUEUED, rng.randint(1, 3), vms=rng.randint(1, 2), vm=HALF, pre=True,
                    arrival=-rng.randint(0, 2) * 1800) for i in range(rng.randint(2, 3))]
    policy = Policy(migration=Migration.YES, exclusion=rng.choice(list(Exclusion)), threshold_factor=0,
                    non_schedulable_interval=0, suspend_for_waiting=True)
    return RoundSnapshot(0, site(nodes, {"CPU": 100, "Memory": 1024}), (running, suspended, *queued), policy)


def test_counted_resumes_agree_with_the_per_vm_model_and_the_mip() -> None:
    """Counting a resume's alike VMs per node is exact: on rounds with a suspendable and a suspended lease of alike
    VMs whose images are spread over the nodes, CP-SAT's optimum with the counts equals its optimum with one
    Boolean per VM and node (`Job.per_vm`, the formulation before) and the per-VM, time-indexed MIP's; the counted
    plan, its VMs laid on their images' nodes first, is safe and costs what the solver says."""
    snaps = [counted_resume_round(seed) for seed in COUNTED_SEEDS]
    mips = solve_rounds_mip(snaps, OPTIONS.weights, lookahead=LOOKAHEAD)
    moved = 0
    for snap, mip in zip(snaps, mips):
        data = prepare(snap, OPTIONS.weights, LOOKAHEAD)
        assert data.job(1).pooled and data.job(1).origin and data.job(2).pooled and data.job(2).origin
        plan = solve_round(snap, OPTIONS)
        check_plan(snap, plan)
        placed = replace(data, jobs=tuple(replace(j, per_vm=True) for j in data.jobs))
        assert not any(j.pooled for j in placed.jobs)
        per_vm = solve_round(snap, OPTIONS, data=placed)
        assert plan.stats.status == per_vm.stats.status == "OPTIMAL" and mip.optimal
        assert plan.stats.objective == per_vm.stats.objective == round(mip.objective)
        assert plan_cost(data, plan) == plan.stats.objective
        moved += sum(len(p.migrations) for p in plan.leases)
    assert moved > 0   # some rounds resume a VM off its image's node
