"""The round's fast paths (models/cpsat-round.md, *Speed at scale*) against the plain computations they replace, on
random rounds: each gives the same jobs, capacities, demands, hints and optimum."""
from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from optlease.domain.lease import LeaseKind
from optlease.domain.site import Site
from optlease.scheduling.cpsat import prepare as prep
from optlease.scheduling.cpsat.decode import _Recorder, add_hint
from optlease.scheduling.cpsat.prepare import Job, Role, prepare
from optlease.scheduling.cpsat.solve import build_round
from test_cpsat_round import random_round
from test_cpsat_vs_mip import pooled_round

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

demands = st.sampled_from([{"CPU": 100, "Memory": 1024}, {"CPU": 50, "Memory": 512}])
node_lists = st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True).map(lambda ns: tuple(sorted(ns)))
jobs = st.builds(lambda vms, role, cands, origin, planned: Job(
    1, LeaseKind.BEST_EFFORT, role, vms, candidates=tuple(cands for _ in vms) if cands else (),
    origin=origin[:len(vms)] if len(origin) >= len(vms) else (),
    planned_nodes=planned[:len(vms)] if len(planned) >= len(vms) else ()),
    st.lists(demands, min_size=1, max_size=3).map(tuple), st.sampled_from(list(Role)),
    st.one_of(st.just(()), node_lists), node_lists, node_lists)
changes = st.fixed_dictionaries({}, optional={
    "role": st.sampled_from(list(Role)), "earliest": st.integers(0, 9), "latest": st.none() | st.integers(0, 9),
    "deferrable": st.booleans(), "candidates": st.lists(node_lists, min_size=1, max_size=3).map(tuple),
    "origin": node_lists, "suspend_ends": st.just(()), "free_end": st.none()})


@SETTINGS
@given(jobs, changes)
def test_a_job_evolved_is_the_job_dataclasses_replace_makes(job: Job, change: dict) -> None:
    """Job.evolve: the same fields as `dataclasses.replace`, and what is derived from them (has_tail, and the cached
    pooled and images_on, asked of the original first so that a copy that kept them would show) made afresh."""
    _ = job.pooled, job.images_on
    fast, plain = job.evolve(**change), dataclasses.replace(job, **change)
    assert fast == plain
    assert fast.has_tail == plain.has_tail == (plain.role in (Role.START, Role.SUSPENDABLE))
    assert fast.pooled == plain.pooled
    assert fast.images_on == plain.images_on


@SETTINGS
@given(jobs, changes)
def test_a_job_made_with_job_of_is_the_job_its_constructor_makes(job: Job, change: dict) -> None:
    """Job.of: the job `Job(**fields)` makes, with what is derived from its fields (has_tail, pooled)."""
    fields = {f.name: getattr(job, f.name) for f in dataclasses.fields(Job) if getattr(job, f.name) != f.default}
    fields.update(change)
    fast, plain = Job.of(**fields), Job(**fields)
    assert fast == plain and repr(fast) == repr(plain)
    assert vars(fast) == vars(plain)
    assert fast.has_tail == plain.has_tail and fast.pooled == plain.pooled


@pytest.mark.parametrize("fields", [dict(id=1, kind=LeaseKind.BEST_EFFORT, role=Role.START),
                                    dict(id=1, kind=LeaseKind.BEST_EFFORT, role=Role.START, demand=(), colour=1)],
                         ids=["a required field missing", "a field it does not have"])
def test_job_of_refuses_what_the_constructor_refuses(fields: dict) -> None:
    with pytest.raises(TypeError):
        Job.of(**fields)


def test_a_job_is_not_evolved_with_a_field_it_does_not_have() -> None:
    job = Job(1, LeaseKind.BEST_EFFORT, Role.START, ({"CPU": 1},))
    try:
        job.evolve(colour="red")
    except TypeError as error:
        assert "colour" in str(error)
    else:
        raise AssertionError("evolve took a field Job does not have")


@pytest.mark.parametrize("vms,role", [
    ([{"CPU": 100, "Memory": 1024}] * 3, Role.START),
    ([{"CPU": 100, "Memory": 1024}, {"CPU": 100, "Memory": 1024}], Role.START),
    ([{"CPU": 300, "Memory": 1024}, {"CPU": 300, "Memory": 1024}], Role.REJECTED),
    ([{"CPU": 100, "Memory": 1024}, {"CPU": 300, "Memory": 1024}], Role.REJECTED),
    ([{"CPU": 300, "Memory": 1024}, {"CPU": 100, "Memory": 1024}], Role.REJECTED),
    ([{"CPU": 100, "Memory": 4096}], Role.START)],
    ids=["one dict", "alike dicts", "alike, too large", "the second too large", "the first too large",
         "the larger node"])
def test_a_lease_is_refused_where_one_of_its_vms_fits_no_node(vms: list, role: Role) -> None:
    """prepare: VMs that all ask alike are checked once against the distinct capacities; any VM that fits no node
    refuses the lease."""
    from optlease.domain.lease import LeaseRequest
    from optlease.scheduling.snapshot import LeaseSnapshot, Phase, RoundSnapshot

    site = Site(("CPU", "Memory"), ({"CPU": 200, "Memory": 2048}, {"CPU": 100, "Memory": 4096}))
    req = LeaseRequest(1, LeaseKind.BEST_EFFORT, 0, 60, tuple(vms))
    job = prepare(RoundSnapshot(0, site, (LeaseSnapshot(req, Phase.QUEUED),))).jobs[0]
    assert job.role is role
    assert (job.reason == "a VM is larger than every node") == (role is Role.REJECTED)


@SETTINGS
@given(st.lists(st.sampled_from([{"CPU": 100, "Memory": 1024}, {"Memory": 1024, "CPU": 100},
                                 {"CPU": 200, "Memory": 2048}]), min_size=1, max_size=8))
def test_capacities_shared_per_distinct_node_are_each_nodes_own(caps: list[dict]) -> None:
    """prepare's capacities (one dict per distinct capacity) equal a copy per node, and none is the site's own."""
    site = Site(("CPU", "Memory"), tuple(dict(c) for c in caps))
    got = prep._capacities(site)
    assert got == {n: dict(site.capacity(n)) for n in site.node_ids}
    assert all(got[n] is not site.capacity(n) for n in site.node_ids)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 30), st.booleans(), st.integers(-1, 1)), max_size=40))
def test_the_hints_written_in_one_piece_are_those_written_one_by_one(calls: list) -> None:
    """decode._Recorder writes the hints as CpModel.add_hint does, one call per variable in the order given: the
    first value of each variable, a negated literal as its variable's opposite."""
    fast_model, plain_model = cp_model.CpModel(), cp_model.CpModel()
    fast_vars = [fast_model.new_bool_var(f"x{i}") for i in range(31)]
    plain_vars = [plain_model.new_bool_var(f"x{i}") for i in range(31)]
    recorder, seen = _Recorder(fast_model), set()
    for index, value, negate in calls:
        fast, plain = fast_vars[index], plain_vars[index]
        if negate < 0:
            fast, plain = ~fast, ~plain
        recorder.add_hint(fast, value)
        if plain.index not in seen:
            seen.add(plain.index)
            plain_model.add_hint(plain, value)
    recorder.flush()
    assert str(fast_model.proto) == str(plain_model.proto)


@SETTINGS
@given(st.lists(st.integers(-5, 5), min_size=4, max_size=4), st.integers(0, 3), st.integers(-9, 9),
       st.integers(-9, 9), st.sampled_from(["var", "negated", "affine", "scaled", "sum", "int"]))
def test_a_hinted_expression_is_read_as_its_flattened_sum(values: list, pick: int, scale: int, shift: int,
                                                          shape: str) -> None:
    """_Recorder.value: a variable, or a variable scaled and shifted, read without flattening, is what the
    flattened expression sums to; so is any other expression; and a variable with no hint is a KeyError."""
    from ortools.sat.python.cp_model_helper import FlatIntExpr

    model = cp_model.CpModel()
    xs = [model.new_int_var(-5, 5, f"x{i}") for i in range(4)]
    b = model.new_bool_var("b")
    recorder = _Recorder(model)
    for x, v in zip(xs, values):
        recorder.add_hint(x, v)
    recorder.add_hint(b, values[0] > 0)
    x = xs[pick]
    expr = {"var": x, "negated": ~b, "affine": x + shift, "scaled": scale * x + shift,
            "sum": x + xs[(pick + 1) % 4] * scale + shift, "int": shift}[shape]
    flat = FlatIntExpr(expr) if shape != "int" else None
    plain = shift if flat is None else flat.offset + sum(
        c * {var.index: v for var, v in zip(xs, values)}.get(var.index, int(values[0] > 0))
        for var, c in zip(flat.vars, flat.coeffs))
    assert recorder.value(expr) == plain
    with pytest.raises(KeyError):
        recorder.value(model.new_int_var(0, 1, "unhinted") * (scale or 1) + shift)


class _OneByOne(_Recorder):
    """The plain computation: each hint written into the model as it is given (CpModel.add_hint per variable)."""

    def add_hint(self, var, value) -> None:
        if var.index in self.values:
            return
        self.model.add_hint(var, value)
        self.values[var.index] = int(value)

    def flush(self) -> None:
        pass


@SETTINGS
@given(st.integers(0, 10_000))
def test_the_hint_of_a_random_round_is_the_one_written_one_by_one(seed: int) -> None:
    """add_hint on random rounds: the model's hint is the one CpModel.add_hint, called per variable, writes."""
    from optlease.scheduling.cpsat import decode

    data = prepare(random_round(seed), lookahead=12)
    models = []
    for recorder in (_Recorder, _OneByOne):
        rm, objective = build_round(data)
        rm.model.minimize(objective)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(decode, "_Recorder", recorder)
            add_hint(rm, random_plan(data, random.Random(seed)))
        models.append(str(rm.model.proto))
    assert models[0] == models[1]


def random_plan(data, rng: random.Random):
    """The plan that changes nothing, with some tails placed at random on their candidates."""
    from optlease.scheduling.cpsat.decode import holding_plan
    from optlease.scheduling.snapshot import LeasePlan, Outcome, Plan

    leases = []
    for p in holding_plan(data).leases:
        job = next(j for j in data.jobs if j.id == p.lease_id)
        if job.has_tail and job.fixed_start is None and all(job.candidates) and rng.random() < 0.6:
            start = rng.randint(job.earliest, data.horizon)
            p = LeasePlan(job.id, Outcome.ACCEPTED, start=start, nodes=tuple(rng.choice(c) for c in job.candidates),
                          end=start + job.resume + job.remaining)
        leases.append(p)
    return Plan(tuple(leases))


def optimum(data) -> int:
    rm, objective = build_round(data)
    rm.model.minimize(objective)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 30
    assert solver.solve(rm.model) == cp_model.OPTIMAL
    return round(solver.objective_value)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_running_leases_on_pooled_nodes_need_no_interval_of_their_own(seed: int) -> None:
    """A running lease on a pooled node has no interval (the pool's staircase holds its slots): on pooled rounds
    the optimum is that of the per-node model (no pools: every running lease an interval in its node's
    cumulative)."""
    data = prepare(pooled_round(seed), lookahead=12)
    per_node = dataclasses.replace(data)
    per_node.__dict__["pools"] = ()   # the round's pools, found once per round data (cpsat.pools): none here
    rm, _ = build_round(data)
    assert rm.pools, "a pooled round pools its nodes"
    assume(any(j.role is Role.FIXED and j.remaining + j.shutdown > 0 for j in data.jobs))
    assert not any(h.node in rm.pool_of for h in rm.holds)
    assert optimum(data) == optimum(per_node)


def test_each_running_lease_of_one_node_is_snapshot_with_its_own_use() -> None:
    """The snapshot's occupancies share one demand dict per use (round_snapshot._shape): each equals the use of
    the lease's reservations on its node, as the plain per-lease computation gives."""
    import io
    from datetime import datetime

    from optlease.domain.lease import LeaseRequest
    from optlease.eventlog import EventLog
    from optlease.scheduling.leasesched import LeaseScheduler
    from optlease.scheduling.options import SchedulingOptions
    from optlease.scheduling.planner import make_planner
    from optlease.scheduling.policies import Policies
    from optlease.scheduling.records import Lease

    rng = random.Random(3)
    site = Site(("CPU", "Memory"), tuple({"CPU": 200, "Memory": 2048} for _ in range(6)))
    sched = LeaseScheduler(site, SchedulingOptions(backfilling="aggressive", mapper="cpsat"), Policies(),
                           EventLog(datetime(2006, 11, 25), "STATUS", io.StringIO()))
    planner = make_planner("cpsat", sched)
    for i in range(1, 13):
        vm = rng.choice([{"CPU": 100, "Memory": 1024}, {"CPU": 50, "Memory": 512}])
        req = LeaseRequest(i, LeaseKind.BEST_EFFORT, 0, rng.randint(10, 240) * 60, (dict(vm),))
        sched.request(Lease(req, {1: sched.table.vector(vm)}), 0)
    sched.schedule(0)
    for rr in sched.table.starting_at(0):
        sched.start_rr(rr, 0)
    snap, _, _ = planner.snapshot(60, [], [], completed={})
    types = sched.table.types
    checked = 0
    for lease in snap.leases:
        rrs = [rr for rr in sched.table.reservations if rr.lease.id == lease.id and rr.demand and rr.end > 60]
        use = {}
        for rr in rrs:
            for n, d in rr.demand.items():
                use[n] = tuple(map(max, use[n], d)) if n in use else d
        assert lease.request.vms == tuple({t: v for t, v in zip(types, use[n]) if v} for n in sorted(use))
        checked += 1
    assert checked == 12


@SETTINGS
@given(st.integers(0, 10_000), st.booleans())
def test_each_pooled_nodes_staircase_is_that_of_its_own_holds(seed: int, shared: bool) -> None:
    """pools.find_pools shares one staircase among nodes whose one hold has the same end and demand dict: each
    pooled node's blocks are the staircase of every running lease on it, as the plain per-node computation gives
    (with the round's demand dicts shared, as the snapshot makes them, or each its own)."""
    from optlease.scheduling.cpsat import pools

    snap = pooled_round(seed)
    if shared:   # one dict per demand, as round_snapshot shares them
        one: dict = {}
        snap = dataclasses.replace(snap, leases=tuple(dataclasses.replace(lease, request=dataclasses.replace(
            lease.request, vms=tuple(one.setdefault(tuple(sorted(vm.items())), vm) for vm in lease.request.vms)))
            for lease in snap.leases))
    data = prepare(snap, lookahead=12)
    found = pools.find_pools(data, local_exclusion=True)
    assert found
    for pool in found:
        for n in pool.nodes:
            holds = [(data.now + j.remaining + j.shutdown, j.demand[vm]) for j in data.jobs
                     if j.role is Role.FIXED and j.remaining + j.shutdown > 0
                     for vm, node in enumerate(j.origin) if node == n]
            cap = data.capacity[n]
            assert pool.blocks[n] == pools._staircase(cap, pool.demand, pool.slots, holds)


def test_the_bench_digests_a_rounds_plan_and_slot_table_the_same_on_every_run(capsys) -> None:
    """scripts/bench_round.py --hashes (what shows a faster round decides the same): a round's plan and slot-table
    digests are the same from run to run, with the setup's garbage collected first or not, and tell plans apart."""
    import importlib.util
    import json
    from pathlib import Path

    from optlease.scheduling.snapshot import LeasePlan, Outcome, Plan

    spec = importlib.util.spec_from_file_location("bench_round", Path(__file__).resolve().parents[1] / "scripts"
                                                  / "bench_round.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    got = []
    for extra in ([], ["--collect-first"]):
        assert bench.main(["--sizes", "40x12", "--seeds", "1", "--hashes", *extra]) == 0
        got.append(json.loads(capsys.readouterr().out)["40-nodes-12-queued"])
    assert got[0] == got[1]
    (run,) = got[0]
    assert len(run["plan_sha"]) == len(run["table_sha"]) == 16
    one = Plan((LeasePlan(1, Outcome.ACCEPTED, start=5, nodes=(1,), end=9),))
    other = Plan((LeasePlan(1, Outcome.ACCEPTED, start=6, nodes=(1,), end=10),))
    assert bench.plan_digest([one]) != bench.plan_digest([other])
