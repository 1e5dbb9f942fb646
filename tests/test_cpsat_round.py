"""The CP-SAT round model: small rounds with known best answers, every plan checked by an independent validator."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optlease.domain.lease import LeaseKind, LeaseRequest
from optlease.domain.site import Site
from optlease.scheduling.cpsat.objective import plan_cost
from optlease.scheduling.cpsat.prepare import prepare
from optlease.scheduling.cpsat.solve import SolveOptions, build_round, solve_round
from optlease.scheduling.snapshot import (Admission, Exclusion, LeasePlan, LeaseSnapshot, Migration, Outcome,
                                          Overheads, Phase, Plan, Policy, Preemption, RoundSnapshot, Suspension)

AR, BE, IM = LeaseKind.AR, LeaseKind.BEST_EFFORT, LeaseKind.IMMEDIATE
VM = {"CPU": 100, "Memory": 1024}
HALF = {"CPU": 50, "Memory": 512}
POLICY = Policy(preemption=Preemption.AR_PREEMPTS_EVERYTHING, non_schedulable_interval=0, threshold_factor=0)
OPTIONS = SolveOptions(workers=1, time_limit=20, lookahead=60)


def site(n: int = 1, cap: dict | None = None) -> Site:
    return Site.homogeneous(n, cap or VM)


def lease(id, kind, phase, dur, vms=1, start=None, pre=False, arrival=0, ov=Overheads(), vm=VM, **kw):
    req = LeaseRequest(id, kind, arrival, dur, tuple(dict(vm) for _ in range(vms)), preemptible=pre, start=start)
    return LeaseSnapshot(req, phase, ov, **kw)


# ---------------------------------------------------------------- the independent plan validator

def check_plan(snap: RoundSnapshot, plan: Plan) -> None:
    """Safety of a plan, from the snapshot and the plan alone: nothing lost, AR windows exact, immediate now,
    policies hold, suspension ends at an accepted AR start, and no node exceeds any resource at any time."""
    now, pol = snap.now, snap.policy
    soon = now + pol.non_schedulable_interval
    got = plan.by_id
    assert sorted(got) == sorted(l.id for l in snap.leases), "every lease appears in the plan exactly once"
    assert len(plan.leases) == len(got)
    accepted_ar_starts = {l.request.start for l in snap.leases
                          if l.kind is AR and got[l.id].outcome is Outcome.ACCEPTED and l.phase is not Phase.RUNNING}
    holds, ops = [], []   # (node, begin, end, demand); (nodes, begin, end)
    for l in snap.leases:
        p, req, ov = got[l.id], l.request, l.overheads
        vms = req.vms
        assert all(n in snap.site.node_ids for n in p.nodes)
        if p.outcome is Outcome.REJECTED:
            assert l.phase is Phase.NEW or l.kind is BE, f"lease {l.id}: only new requests are refused"
            assert p.reason, "a refusal says why"
            continue
        if p.outcome is Outcome.DEFERRED:
            assert l.kind is BE, f"lease {l.id}: only best-effort leases wait past the look-ahead"
        resume_from, ready, run = None, soon, l.remaining
        if l.phase is Phase.RUNNING:
            if p.suspend_at is None:
                assert p.outcome is Outcome.ACCEPTED and p.end == now + l.remaining
                holds += [(n, now, now + l.remaining + ov.shutdown, vms[i]) for i, n in enumerate(l.nodes)]
                continue
            s = p.suspend_at
            assert req.preemptible and l.kind is BE, f"lease {l.id}: only preemptible best-effort is suspended"
            assert pol.suspension is not Suspension.NONE
            assert pol.suspension is Suspension.ALL or req.numnodes == 1, "serial-only suspends 1-VM leases only"
            assert soon <= s < now + l.remaining
            if pol.suspend_for_waiting and s == soon:
                pass   # suspended as soon as the round may act, for waiting leases
            else:
                assert pol.preemption is Preemption.AR_PREEMPTS_EVERYTHING
                assert s + ov.suspend in accepted_ar_starts, "a suspension ends as an accepted AR starts"
            since = l.since if l.since is not None else now - l.ran
            assert s - since >= pol.threshold_factor * (ov.suspend + ov.resume), "scheduling threshold"
            holds += [(n, now, s + ov.suspend, vms[i]) for i, n in enumerate(l.nodes)]
            if ov.suspend:
                ops.append((set(l.nodes), s, s + ov.suspend))
            resume_from, ready, run = l.nodes, s + ov.suspend, l.remaining - (s - now)
        elif l.phase is Phase.SUSPENDED:
            resume_from = l.nodes
        else:
            assert p.suspend_at is None
        if l.planned_start is not None:   # announced earlier: it may keep a start inside the non-schedulable interval
            ready = max(now, min(ready, l.planned_start))
        if p.outcome is Outcome.DEFERRED:
            assert l.phase is not Phase.RESERVED or l.kind is BE
            continue
        assert len(p.nodes) == req.numnodes and p.start is not None
        if l.kind is AR:
            assert p.start == req.start, "an AR starts exactly when it asked"
        elif l.kind is IM:
            assert p.start == soon, "an immediate lease starts now"
        else:
            assert p.start >= ready
        resume = ov.resume if resume_from else 0
        assert p.end == p.start + resume + run
        for i, n in enumerate(p.nodes):
            moved = resume_from is not None and n != resume_from[i]
            if moved:
                assert pol.migration is not Migration.NO, "migration=no resumes a VM where its image is"
                assert (i + 1, resume_from[i], n) in p.migrations
            mig = (0 if pol.migration is Migration.YES_NOTRANSFER else ov.migrate) if moved else 0
            assert p.start - mig >= ready   # the image is copied first; the copy holds no node (as booked)
            holds.append((n, p.start, p.end + ov.shutdown, vms[i]))
        if resume:
            ops.append((set(p.nodes), p.start, p.start + resume))
    for n in snap.site.node_ids:
        cap = snap.site.capacity(n)
        mine = [h for h in holds if h[0] == n]
        for t in sorted({h[1] for h in mine}):
            for rtype in snap.site.resource_types:
                used = sum(h[3].get(rtype, 0) for h in mine if h[1] <= t < h[2])
                assert used <= cap.get(rtype, 0), f"node {n} holds {used} {rtype} at {t}, more than it has"
    for i, (na, a0, a1) in enumerate(ops):
        for nb, b0, b1 in ops[i + 1:]:
            if pol.exclusion is Exclusion.GLOBAL or na & nb:
                assert a1 <= b0 or b1 <= a0, "suspensions and resumptions are exclusive"


def solve_checked(snap: RoundSnapshot, options: SolveOptions = OPTIONS, hint: Plan | None = None) -> Plan:
    plan = solve_round(snap, options, hint)
    check_plan(snap, plan)
    assert plan_cost(prepare(snap, options.weights, options.lookahead), plan) == plan.stats.objective
    return plan


# ---------------------------------------------------------------- rounds with a known best answer

RUNNING_PRE = lease(1, BE, Phase.RUNNING, 100, pre=True, left=50, since=-50, nodes=(1,), ov=Overheads(5, 5, 2, 0))
RUNNING_NONPRE = replace(RUNNING_PRE, request=replace(RUNNING_PRE.request, preemptible=False))
NEW_AR = lease(2, AR, Phase.NEW, 10, start=20)

CASES = [
    pytest.param(RoundSnapshot(0, site(), (RUNNING_PRE, NEW_AR), POLICY),
                 {1: (Outcome.ACCEPTED, dict(suspend_at=15, start=30, end=70)), 2: (Outcome.ACCEPTED, dict(start=20))},
                 id="ar-fits-only-if-preemptible-is-suspended"),
    pytest.param(RoundSnapshot(0, site(), (RUNNING_NONPRE, NEW_AR), POLICY),
                 {1: (Outcome.ACCEPTED, dict(suspend_at=None)), 2: (Outcome.REJECTED, {})},
                 id="non-preemptible-is-never-interrupted"),
    pytest.param(RoundSnapshot(0, site(), (RUNNING_PRE, NEW_AR), replace(POLICY, preemption=Preemption.NO_PREEMPTION)),
                 {2: (Outcome.REJECTED, {})}, id="no-preemption-policy"),
    pytest.param(RoundSnapshot(0, site(), (RUNNING_PRE, NEW_AR), replace(POLICY, admission=Admission.NO_ARS)),
                 {1: (Outcome.ACCEPTED, dict(suspend_at=None)), 2: (Outcome.REJECTED, {})}, id="admission-no-ARs"),
    pytest.param(RoundSnapshot(0, site(), (replace(RUNNING_PRE, since=0), NEW_AR), replace(POLICY, threshold_factor=2)),
                 {2: (Outcome.REJECTED, {})}, id="threshold-forbids-suspending-a-fresh-lease"),
    pytest.param(RoundSnapshot(0, site(), (lease(1, AR, Phase.RUNNING, 30, left=30, nodes=(1,)),
                                           lease(2, IM, Phase.NEW, 10)), POLICY),
                 {2: (Outcome.REJECTED, {})}, id="immediate-rejected-when-nothing-is-free"),
    pytest.param(RoundSnapshot(0, site(2), (lease(1, AR, Phase.RUNNING, 30, left=30, nodes=(1,)),
                                            lease(2, IM, Phase.NEW, 10)), replace(POLICY, non_schedulable_interval=3)),
                 {2: (Outcome.ACCEPTED, dict(start=3, nodes=(2,)))}, id="immediate-starts-now-where-free"),
    pytest.param(RoundSnapshot(0, site(), (lease(1, AR, Phase.RESERVED, 20, start=10, planned_nodes=(1,)),
                                           lease(2, BE, Phase.QUEUED, 15)), POLICY),
                 {2: (Outcome.ACCEPTED, dict(start=30))}, id="best-effort-waits-for-an-ar"),
    pytest.param(RoundSnapshot(0, site(), (lease(1, AR, Phase.RESERVED, 20, start=10, planned_nodes=(1,)),
                                           lease(2, BE, Phase.QUEUED, 10)), POLICY),
                 {2: (Outcome.ACCEPTED, dict(start=0))}, id="best-effort-backfills-before-an-ar"),
    pytest.param(RoundSnapshot(0, site(2), (lease(1, BE, Phase.RUNNING, 100, vms=2, pre=True, left=50, nodes=(1, 2)),
                                            lease(2, AR, Phase.NEW, 10, start=20)),
                               replace(POLICY, suspension=Suspension.SERIAL_ONLY)),
                 {1: (Outcome.ACCEPTED, dict(suspend_at=None)), 2: (Outcome.REJECTED, {})},
                 id="serial-only-forbids-suspending-a-2-vm-lease"),
    pytest.param(RoundSnapshot(0, site(2), (lease(1, BE, Phase.RUNNING, 100, vms=2, pre=True, left=50, nodes=(1, 2)),
                                            lease(2, AR, Phase.NEW, 10, start=20)), POLICY),
                 {1: (Outcome.ACCEPTED, dict(suspend_at=20, start=30)), 2: (Outcome.ACCEPTED, {})},
                 id="suspension-all-suspends-a-2-vm-lease"),
    pytest.param(RoundSnapshot(0, site(2), (lease(1, AR, Phase.RUNNING, 20, left=20, nodes=(1,)),
                                            lease(2, BE, Phase.SUSPENDED, 30, left=10, nodes=(1,),
                                                  ov=Overheads(2, 2, 3, 0))), POLICY),
                 {2: (Outcome.ACCEPTED, dict(start=20, nodes=(1,), migrations=()))},
                 id="migration-no-resumes-where-the-image-is"),
    pytest.param(RoundSnapshot(0, site(2), (lease(1, AR, Phase.RUNNING, 20, left=20, nodes=(1,)),
                                            lease(2, BE, Phase.SUSPENDED, 30, left=10, nodes=(1,),
                                                  ov=Overheads(2, 2, 3, 0))), replace(POLICY, migration=Migration.YES)),
                 {2: (Outcome.ACCEPTED, dict(start=3, nodes=(2,), migrations=((1, 1, 2),)))},
                 id="migration-yes-moves-a-suspended-lease-to-a-free-node"),
    pytest.param(RoundSnapshot(0, site(2), (lease(1, BE, Phase.RUNNING, 50, pre=True, left=40, nodes=(1,),
                                                  ov=Overheads(5, 5, 0, 0)),
                                            lease(3, BE, Phase.RUNNING, 50, pre=True, left=40, nodes=(2,),
                                                  ov=Overheads(5, 5, 0, 0)),
                                            lease(2, AR, Phase.NEW, 10, vms=2, start=20)),
                               replace(POLICY, exclusion=Exclusion.GLOBAL)),
                 {2: (Outcome.REJECTED, {})}, id="global-exclusion-cannot-suspend-two-at-once"),
    pytest.param(RoundSnapshot(0, site(2), (lease(1, BE, Phase.RUNNING, 50, pre=True, left=40, nodes=(1,),
                                                  ov=Overheads(5, 5, 0, 0)),
                                            lease(3, BE, Phase.RUNNING, 50, pre=True, left=40, nodes=(2,),
                                                  ov=Overheads(5, 5, 0, 0)),
                                            lease(2, AR, Phase.NEW, 10, vms=2, start=20)), POLICY),
                 {2: (Outcome.ACCEPTED, {}), 1: (Outcome.ACCEPTED, dict(suspend_at=15)),
                  3: (Outcome.ACCEPTED, dict(suspend_at=15))}, id="local-exclusion-suspends-on-two-nodes-at-once"),
    pytest.param(RoundSnapshot(10_000, site(), (lease(1, BE, Phase.QUEUED, 10, arrival=9_000),
                                                lease(2, BE, Phase.QUEUED, 10, arrival=1_000)), POLICY),
                 {2: (Outcome.ACCEPTED, dict(start=10_000)), 1: (Outcome.ACCEPTED, dict(start=10_010))},
                 id="aging-runs-the-older-request-first"),
    pytest.param(RoundSnapshot(0, site(3), (lease(1, BE, Phase.RESERVED, 10, planned_start=0, planned_nodes=(3,)),),
                               POLICY), {1: (Outcome.ACCEPTED, dict(start=0, nodes=(3,)))},
                 id="stability-keeps-the-planned-node"),
    pytest.param(RoundSnapshot(0, site(1, {"CPU": 200, "Memory": 2048}), (lease(1, BE, Phase.QUEUED, 10, vms=2),),
                               POLICY), {1: (Outcome.ACCEPTED, dict(start=0, nodes=(1, 1)))},
                 id="vms-of-a-lease-share-a-node"),
    pytest.param(RoundSnapshot(0, site(), (lease(1, BE, Phase.QUEUED, 10, vm={"CPU": 300, "Memory": 1}),), POLICY),
                 {1: (Outcome.REJECTED, {})}, id="a-vm-larger-than-every-node-is-refused"),
    pytest.param(RoundSnapshot(0, site(), (lease(1, AR, Phase.RUNNING, 100, left=100, nodes=(1,)),
                                           lease(2, BE, Phase.QUEUED, 10)), POLICY),
                 {2: (Outcome.DEFERRED, {})}, id="best-effort-deferred-past-the-look-ahead"),
]


@pytest.mark.parametrize("snap, expected", CASES)
def test_known_rounds(snap: RoundSnapshot, expected: dict) -> None:
    plan = solve_checked(snap)
    assert plan.stats.status == "OPTIMAL"
    for lease_id, (outcome, fields) in expected.items():
        got = plan.of(lease_id)
        assert got.outcome is outcome, got
        for name, value in fields.items():
            assert getattr(got, name) == value, (name, got)


def test_hint_is_kept_when_the_solver_finds_nothing() -> None:
    """A planned AR that no longer fits makes the model infeasible: the round still returns a plan, the hint."""
    snap = RoundSnapshot(0, site(), (lease(1, AR, Phase.RUNNING, 30, left=30, nodes=(1,)),
                                     lease(2, AR, Phase.RESERVED, 10, start=5, planned_nodes=(1,))), POLICY)
    hint = trivial_hint(snap)
    plan = solve_round(snap, OPTIONS, hint)
    assert plan.stats.source == "hint" and plan.stats.status.startswith("HINT")
    assert plan.leases == hint.leases


def test_the_wall_clock_cap_is_a_safety_net_that_says_when_it_fired(caplog) -> None:
    """A search is stopped by its deterministic work limit; the wall-clock cap is only a safety net. When the cap
    stops a search before its work limit, the stats say so and a warning is logged (that plan may differ from run
    to run); a search stopped by its work limit or finished is not flagged, and a round still returns a plan."""
    snap = CASES[0].values[0]
    hint = trivial_hint(snap)
    done = solve_round(snap, replace(OPTIONS, work_limit=5.0), hint)
    assert not done.stats.capped and done.stats.status == "OPTIMAL"
    with caplog.at_level("WARNING", logger="optlease.scheduling.cpsat.solve"):
        cut = solve_round(snap, replace(OPTIONS, work_limit=5.0, time_limit=1e-9), hint)
    assert cut.stats.capped and cut.stats.status != "OPTIMAL"
    assert "wall-clock cap" in caplog.text
    assert cut.stats.objective is not None and cut.stats.objective >= done.stats.objective


def test_stats_record_the_model_size_and_time() -> None:
    plan = solve_checked(CASES[0].values[0])
    assert plan.stats.num_variables > 0 and plan.stats.num_constraints > 0
    assert plan.stats.gap == 0.0 and plan.stats.best_bound == plan.stats.objective
    assert 0 <= plan.stats.wall_time < 5


# ---------------------------------------------------------------- random small rounds (shared with the MIP test)

def trivial_hint(snap: RoundSnapshot) -> Plan:
    """A plan that is always safe: running leases go on, new requests are refused, best-effort waits."""
    out = []
    for l in snap.leases:
        if l.phase is Phase.RUNNING:
            out.append(LeasePlan(l.id, Outcome.ACCEPTED, nodes=l.nodes, end=snap.now + l.remaining))
        elif l.phase is Phase.RESERVED and l.kind is AR:
            out.append(LeasePlan(l.id, Outcome.ACCEPTED, start=l.request.start, nodes=l.planned_nodes,
                                 end=l.request.start + l.remaining))
        elif l.kind is BE:
            out.append(LeasePlan(l.id, Outcome.DEFERRED, reason="hint"))
        else:
            out.append(LeasePlan(l.id, Outcome.REJECTED, reason="hint"))
    return Plan(tuple(out))


def random_round(seed: int, nodes: int = 3, leases: int = 5, span: int = 8) -> RoundSnapshot:
    """A small consistent round: running and reserved leases fit where they are, everything else is free."""
    rng = random.Random(seed)
    caps = [{"CPU": rng.choice([100, 200]), "Memory": 1024} for _ in range(nodes)]
    the_site = Site(("CPU", "Memory"), tuple(caps))
    busy: list[tuple[int, int, int, dict]] = []   # node, begin, end, demand

    def room(node: int, begin: int, end: int, demand: dict) -> bool:
        return all(sum(d[r] for n, b, e, d in busy if n == node and b <= t < e) + demand[r] <= caps[node - 1][r]
                   for t in range(begin, end) for r in ("CPU", "Memory"))

    def room_for_all(where: tuple[int, ...], begin: int, end: int, demand: dict) -> bool:
        """Room for every VM at once (several VMs may share a node)."""
        return all(room(n, begin, end, {r: demand[r] * where.count(n) for r in demand}) for n in set(where))

    policy = Policy(suspension=rng.choice(list(Suspension)), migration=rng.choice(list(Migration)),
                    exclusion=rng.choice(list(Exclusion)), threshold_factor=rng.choice([0, 1]),
                    admission=Admission.ACCEPT_ALL, preemption=rng.choice(list(Preemption)),
                    non_schedulable_interval=rng.choice([0, 1]))
    out = []
    for i in range(1, leases + 1):
        vms = rng.choice([1, 1, 2])
        vm = rng.choice([VM, HALF])
        dur = rng.randint(1, span)
        ov = Overheads(rng.randint(0, 2), rng.randint(0, 2), rng.randint(0, 2), rng.randint(0, 1))
        kind = rng.choice([AR, BE, BE, IM])
        phase = rng.choice([Phase.NEW, Phase.RUNNING, Phase.RUNNING, Phase.QUEUED, Phase.SUSPENDED, Phase.RESERVED])
        arrival = -rng.randint(0, 3) * 1800
        req = LeaseRequest(i, kind, arrival, dur, tuple(dict(vm) for _ in range(vms)),
                           preemptible=kind is BE and rng.random() < 0.7,
                           start=rng.randint(1, span) if kind is AR else None)
        if phase is Phase.RUNNING:   # running leases tend to reach past the ARs, so suspending one can pay
            left = rng.randint(max(1, dur // 2), dur + span // 2)
            req = replace(req, duration=max(dur, left))
            where = tuple(rng.randint(1, nodes) for _ in range(vms))
            if room_for_all(where, 0, left + ov.shutdown, vm):
                busy.extend((n, 0, left + ov.shutdown, vm) for n in where)
                out.append(LeaseSnapshot(replace(req, start=None if kind is not AR else -1), phase, ov, nodes=where,
                                         left=left, since=-rng.randint(0, 4)))
                continue
            phase = Phase.QUEUED
        if kind is IM:
            out.append(LeaseSnapshot(req, Phase.NEW, ov))
        elif kind is AR and phase is Phase.RESERVED:
            where = tuple(rng.randint(1, nodes) for _ in range(vms))
            if room_for_all(where, req.start, req.start + dur + ov.shutdown, vm):
                busy.extend((n, req.start, req.start + dur + ov.shutdown, vm) for n in where)
                out.append(LeaseSnapshot(req, phase, ov, planned_nodes=where))
            else:
                out.append(LeaseSnapshot(req, Phase.NEW, ov))
        elif kind is AR:
            out.append(LeaseSnapshot(req, Phase.NEW, ov))
        elif phase is Phase.SUSPENDED:
            out.append(LeaseSnapshot(req, phase, ov, nodes=tuple(rng.randint(1, nodes) for _ in range(vms)),
                                     left=rng.randint(1, dur), ran=1))
        elif phase is Phase.RESERVED:
            out.append(LeaseSnapshot(req, phase, ov, planned_start=rng.randint(0, span),
                                     planned_nodes=tuple(rng.randint(1, nodes) for _ in range(vms))))
        else:
            out.append(LeaseSnapshot(req, phase, ov))
    return RoundSnapshot(0, the_site, tuple(out), policy)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), nodes=st.integers(1, 3), leases=st.integers(1, 6))
def test_random_rounds_are_safe_and_never_worse_than_the_hint(seed: int, nodes: int, leases: int) -> None:
    snap = random_round(seed, nodes, leases)
    hint = trivial_hint(snap)
    options = SolveOptions(workers=1, time_limit=5, lookahead=16)
    plan = solve_round(snap, options, hint)
    check_plan(snap, plan)
    data = prepare(snap, options.weights, options.lookahead)
    assert plan_cost(data, plan) <= plan_cost(data, hint)
    assert plan.stats.objective == plan_cost(data, plan)
    # a real plan as the hint (as the greedy plan will be): the answer is safe and at least as good
    again = solve_round(snap, replace(options, seed=7), plan)
    check_plan(snap, again)
    assert plan_cost(data, again) <= plan_cost(data, plan)


# ---------------------------------------------------------------- the wait guard

def test_wait_guard_keeps_a_long_waiting_lease_ahead_of_a_shorter_one():
    """On one node, with equal weights (no slowdown weighting), the shortest lease first minimizes the completion
    time (10 + 40 against 40 + 50), so without a guard the old 40-second lease goes second; its `latest_start` keeps
    it first. (With slowdown weights over this 60 s look-ahead, leaving the guarded lease past the look-ahead would
    cost less than starting it first: the guard bounds a start, not a deferral.)"""
    from optlease.scheduling.snapshot import Weights

    options = replace(OPTIONS, weights=Weights(slowdown=0))
    old = lease(1, BE, Phase.QUEUED, 40, arrival=0)
    young = lease(2, BE, Phase.QUEUED, 10, arrival=0)
    free = solve_round(RoundSnapshot(0, site(1), (old, young), POLICY), options)
    assert free.of(2).start == 0 and free.of(1).start == 10
    guarded = RoundSnapshot(0, site(1), (replace(old, latest_start=0), young), POLICY)
    plan = solve_round(guarded, options)
    check_plan(guarded, plan)
    assert plan.of(1).start == 0 and plan.of(2).start == 40
    assert plan.stats.status == "OPTIMAL" and plan.stats.objective == plan_cost(prepare(guarded, options.weights, 60),
                                                                                plan)


def test_pooled_vms_are_placed_and_counted_like_single_ones():
    """Four identical fresh VMs on two nodes holding two each: the pooled model puts two on each node, and keeps
    the VMs on their planned nodes (stability) when it moves nothing else."""
    cap = {"CPU": 200, "Memory": 2048}
    four = lease(1, BE, Phase.RESERVED, 30, vms=4, planned_start=5, planned_nodes=(2, 2, 1, 1))
    snap = RoundSnapshot(0, site(2, cap), (four,), POLICY)
    data = prepare(snap, OPTIONS.weights, 60)
    assert data.job(1).pooled and data.job(1).per_node(cap) == 2
    plan = solve_round(snap, OPTIONS)
    check_plan(snap, plan)
    assert plan.of(1).start == 0 and sorted(plan.of(1).nodes) == [1, 1, 2, 2]
    assert plan.of(1).nodes == (2, 2, 1, 1)   # every VM kept its planned node
    assert plan.stats.objective == plan_cost(data, plan)


def test_a_resource_no_interval_asks_more_of_is_left_to_the_other_and_a_binding_one_is_kept():
    """Where every VM on a node asks the same share of CPU and memory, one cumulative per node states capacity; where
    one VM is memory-heavy, memory keeps its own: two 768 MB VMs cannot share a 1,024 MB node even with CPU to
    spare, and the shorter runs first."""
    cap = {"CPU": 200, "Memory": 1024}
    proportional = RoundSnapshot(0, site(2), (lease(1, BE, Phase.QUEUED, 10, vms=2),
                                              lease(2, BE, Phase.QUEUED, 20)), POLICY)
    heavy = {"CPU": 50, "Memory": 768}
    mixed = RoundSnapshot(0, site(1, cap), (lease(1, BE, Phase.QUEUED, 30, vm=heavy),
                                            lease(2, BE, Phase.QUEUED, 10, vm=heavy),
                                            lease(3, BE, Phase.QUEUED, 10, vm={"CPU": 150, "Memory": 128})), POLICY)
    cumulatives = {}
    for name, snap in (("proportional", proportional), ("mixed", mixed)):
        rm, _ = build_round(prepare(snap, OPTIONS.weights, 60))
        cumulatives[name] = sum(1 for c in rm.model.proto.constraints if c.has_cumulative())
    # proportional: the two alike nodes are one pool of VM slots (cpsat.pools); mixed: CPU and memory on the node
    assert cumulatives == {"proportional": 1, "mixed": 2}
    plan = solve_checked(mixed)
    assert plan.stats.status == "OPTIMAL"
    assert plan.of(2).start == 0 and plan.of(1).start == 10   # never both heavy VMs at once
    assert plan.of(3).start == 0   # CPU has room for it beside a heavy VM


def test_a_vm_that_names_no_gpu_holds_none_so_no_node_keeps_operations_apart_by_gpu():
    """The exclusion of suspensions and resumes on a node is left to its capacity only where no two leases' least
    demands fit together: a VM that does not name a resource asks none of it, so it cannot keep leases apart."""
    from optlease.scheduling.cpsat.constraints import _held_apart, _least
    least = _least([{"CPU": 100, "GPU": 1}, {"CPU": 100}])
    assert least == {"CPU": 100, "GPU": 0}
    node = {"CPU": 200, "GPU": 1}
    # two leases whose VMs each may hold no GPU there fit the node together: its capacity keeps nothing apart
    assert not _held_apart([(1, least, None), (2, least, None)], node)
    # VMs that each ask the node's one GPU do not fit together: the no-overlap is redundant
    assert _held_apart([(1, {"CPU": 100, "GPU": 1}, None), (2, {"CPU": 100, "GPU": 1}, None)], node)
