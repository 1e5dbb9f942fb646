"""A lease the round may suspend for waiting ones is planned to resume on its own nodes (its resume is a forecast the
suspending round never commits); one it may suspend for an AR keeps every node the policy allows; a node that holds
one VM at a time may pool resumes under local exclusion (models/cpsat-round.md, *Suspending for waiting leases*,
*Node pools*)."""
from __future__ import annotations

import pytest

from optlease.scheduling.cpsat.model import build_variables
from optlease.scheduling.cpsat.pools import find_pools
from optlease.scheduling.cpsat.prepare import Role, prepare
from optlease.scheduling.cpsat.solve import solve_round
from optlease.scheduling.snapshot import Exclusion, Migration, Overheads, Phase, Policy, Preemption, RoundSnapshot

from test_cpsat_round import AR, BE, HALF, OPTIONS, VM, check_plan, lease, site

OV = Overheads(suspend=2, resume=2, migrate=3, shutdown=0)


def for_waiting(nodes: int, vm: dict, running_on: tuple[int, ...], migration=Migration.YES) -> RoundSnapshot:
    """A running preemptible lease on `running_on` the round may suspend at once, and two short leases waiting."""
    running = lease(1, BE, Phase.RUNNING, 600, vms=len(running_on), pre=True, vm=vm, ov=OV, nodes=running_on,
                    left=500, ran=100, since=-100, arrival=-3600)
    queued = [lease(2 + i, BE, Phase.QUEUED, 20, vms=1, vm=vm, pre=True, arrival=-60) for i in range(2)]
    policy = Policy(migration=migration, exclusion=Exclusion.LOCAL, threshold_factor=0, non_schedulable_interval=0,
                    suspend_for_waiting=True)
    return RoundSnapshot(0, site(nodes, VM), (running, *queued), policy)


@pytest.mark.parametrize("vm, running_on, own", [
    pytest.param(VM, (1, 2), (1, 2), id="a-vm-fills-a-node"),
    pytest.param(HALF, (3, 3, 1), (1, 3), id="two-vms-a-node"),
])
def test_a_lease_suspended_for_waiting_ones_is_planned_to_resume_on_its_own_nodes(vm, running_on, own):
    data = prepare(for_waiting(4, vm, running_on), OPTIONS.weights, 60)
    job = data.job(1)
    assert job.role is Role.SUSPENDABLE and job.suspend_ends == (job.free_end,)
    assert job.candidates == tuple(own for _ in running_on)
    assert job.pooled   # its VMs still counted per node: a VM moved among its own nodes is a migration
    # the queued leases may go anywhere
    assert data.job(2).candidates == ((1, 2, 3, 4),)


def test_the_suspension_for_waiting_leases_is_still_made_and_the_plan_is_safe():
    """One node: the 500 s lease left is suspended for the two 20 s ones, and its planned resume is on its node."""
    snap = for_waiting(1, VM, (1,))
    plan = solve_round(snap, OPTIONS)
    check_plan(snap, plan)
    got = plan.by_id[1]
    assert got.suspend_at == 0 and got.nodes == (1,) and not got.migrations


def test_a_lease_suspended_for_an_ar_keeps_every_node_migration_allows():
    """For an AR's admission the resume is what the admission trades against: every node stays a candidate."""
    running = lease(1, BE, Phase.RUNNING, 600, vms=2, pre=True, ov=OV, nodes=(1, 2), left=500, ran=100, since=-100)
    ar = lease(2, AR, Phase.NEW, 50, vms=2, start=30)
    policy = Policy(migration=Migration.YES, preemption=Preemption.AR_PREEMPTS_EVERYTHING, threshold_factor=0,
                    non_schedulable_interval=0)
    data = prepare(RoundSnapshot(0, site(4), (running, ar), policy), OPTIONS.weights, 60)
    job = data.job(1)
    assert job.role is Role.SUSPENDABLE and job.free_end is None
    assert job.candidates == ((1, 2, 3, 4), (1, 2, 3, 4))


@pytest.mark.parametrize("vm, pooled", [
    pytest.param(VM, True, id="one-vm-a-node-pools"),
    pytest.param(HALF, False, id="two-vms-a-node-named"),
])
def test_a_resume_under_local_exclusion_pools_only_where_a_node_holds_one_vm_at_a_time(vm, pooled):
    """A suspended lease waiting to resume anywhere, under local exclusion: where a node holds one VM at a time, the
    nodes nothing names form a pool (no two operations can overlap there); where it holds two, none does."""
    suspended = lease(1, BE, Phase.SUSPENDED, 300, vms=2, pre=True, vm=vm, ov=OV, nodes=(1, 2), left=200, ran=100)
    queued = lease(2, BE, Phase.QUEUED, 20, vms=1, vm=vm, pre=True)
    policy = Policy(migration=Migration.YES, exclusion=Exclusion.LOCAL, threshold_factor=0,
                    non_schedulable_interval=0)
    snap = RoundSnapshot(0, site(6), (suspended, queued), policy)
    data = prepare(snap, OPTIONS.weights, 600)
    pools = find_pools(data, local_exclusion=True)
    assert bool(pools) == pooled
    if pooled:
        # the untouched nodes, cut to as many as there are VMs to place (identical-node classes)
        assert set(pools[0].nodes) == {3, 4, 5} and pools[0].slots == 1
        assert any(lease_id == 1 for lease_id, _ in build_variables(data).vms_in_pool)   # the resume may go there
    plan = solve_round(snap, OPTIONS)
    check_plan(snap, plan)
