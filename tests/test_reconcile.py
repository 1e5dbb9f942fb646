"""The pure reconcile step: desired state from reservation rows, the buckets of each kind of change, their waves,
and the safety property (no host ever holds more than it can, and the waves end exactly in the plan)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optlease.enact.base import HostInfo, vm_name
from optlease.reconcile import (ABSENT, RUNNING, SUSPENDED, Row, VmPlacement, apply_task, desired_state,
                                reconcile)

A, B, C, D = (vm_name(1, 1), vm_name(2, 1), vm_name(3, 1), vm_name(4, 1))


def hosts(capacity: int = 1, dead: tuple[str, ...] = (), names=("h1", "h2", "h3")) -> dict[str, HostInfo]:
    return {h: HostInfo(h, {"vcpus": capacity}, alive=h not in dead) for h in names}


def run(state: str, host: str | None = None, vcpus: int = 1) -> VmPlacement:
    return VmPlacement(host if state != ABSENT else None, state, vcpus)


# ------------------------------------------------------------------------------------------------ desired state

ROWS = [
    Row(1, 1, "vm", 0, 10, 1), Row(1, 1, "suspend", 10, 12, 1),
    Row(1, 1, "migrate", 20, 25, 2, 1), Row(1, 1, "resume", 30, 32, 2), Row(1, 1, "vm", 32, 50, 2),
    Row(1, 1, "shutdown", 50, 51, 2),
    (2, 1, "vm", 5, 15, 3, None),        # a plain tuple works too; ends without a shutdown
]
HOSTS = {1: "h1", 2: "h2", 3: "h3"}


@pytest.mark.parametrize("now, expected", [
    (-1, {}),
    (0, {A: run(RUNNING, "h1")}),
    (10, {A: run(SUSPENDED, "h1"), B: run(RUNNING, "h3")}),
    (15, {A: run(SUSPENDED, "h1"), B: run(ABSENT)}),
    (21, {A: run(SUSPENDED, "h2"), B: run(ABSENT)}),
    (30, {A: run(RUNNING, "h2"), B: run(ABSENT)}),
    (50, {A: run(ABSENT), B: run(ABSENT)}),
], ids=["before", "vm", "suspend-begun", "vm-ended", "image-migrating", "resume", "shutdown"])
def test_desired_state_follows_the_reservations(now, expected):
    assert desired_state(ROWS, now, HOSTS) == expected


def test_an_unmapped_node_is_named():
    with pytest.raises(ValueError, match="node 3 has no host name"):
        desired_state(ROWS, 6, {1: "h1"})


# ------------------------------------------------------------------------------------------------------ buckets

def names(tasks):
    return sorted((t.kind, t.vm, t.host, t.destination) for t in tasks)


CASES = [
    pytest.param({A: ("h1", "running")}, {A: run(RUNNING, "h1")}, {}, {"ignore": [A]}, 0, id="nothing-to-do"),
    pytest.param({}, {A: run(RUNNING, "h1")}, {}, {"start": [("start", A, "h1", None)]}, 1, id="start"),
    pytest.param({A: ("h1", "running")}, {}, {}, {"stop": [("stop", A, "h1", None)]}, 1, id="stop"),
    pytest.param({A: ("h1", "running")}, {A: run(SUSPENDED, "h1")}, {},
                 {"suspend": [("suspend", A, "h1", None)]}, 1, id="suspend"),
    pytest.param({A: ("h1", "paused")}, {A: run(RUNNING, "h2")}, {},
                 {"migrate": [("migrate", A, "h1", "h2")], "resume": [("resume", A, "h2", None)]}, 2,
                 id="resume-elsewhere"),
    # A and B trade hosts, both full: one swap-with migration
    pytest.param({A: ("h1", "running"), B: ("h2", "running")}, {A: run(RUNNING, "h2"), B: run(RUNNING, "h1")}, {},
                 {"migrate": [("migrate", A, "h1", "h2")]}, 1, id="swap-cycle"),
    # a 3-cycle of full hosts: one VM goes through a suspension, the other two move, then it resumes
    pytest.param({A: ("h1", "running"), B: ("h2", "running"), C: ("h3", "running")},
                 {A: run(RUNNING, "h2"), B: run(RUNNING, "h3"), C: run(RUNNING, "h1")}, {},
                 {"suspend": [("suspend", A, "h1", None)],
                  "migrate": [("migrate", A, "h1", "h2"), ("migrate", B, "h2", "h3"), ("migrate", C, "h3", "h1")],
                  "resume": [("resume", A, "h2", None)]}, 4, id="3-cycle-suspends-one"),
    pytest.param({A: ("h1", "running"), B: ("h2", "running")}, {A: run(RUNNING, "h1"), B: run(RUNNING, "h2")},
                 {"dead": ("h1",)}, {"ignore": [B], "lost": [A]}, 0, id="vm-on-dead-host"),
    # the start waits for the stop that makes room for it on the full host
    pytest.param({A: ("h1", "running")}, {B: run(RUNNING, "h1")}, {},
                 {"stop": [("stop", A, "h1", None)], "start": [("start", B, "h1", None)]}, 2, id="stop-then-start"),
    pytest.param({A: ("h1", "running"), D: ("h9", "running"), "web-1": ("h1", "running")},
                 {A: run(RUNNING, "h1")}, {}, {"ignore": [A, "web-1"], "lost": [D]}, 0, id="unknown-host-foreign-vm"),
]


@pytest.mark.parametrize("actual, desired, options, expected, nwaves", CASES)
def test_buckets(actual, desired, options, expected, nwaves):
    b = reconcile(actual, desired, hosts(**options), "live")
    for bucket in ("stop", "suspend", "migrate", "resume", "start"):
        assert names(getattr(b, bucket)) == sorted(expected.get(bucket, [])), bucket
    assert sorted(b.ignore) == sorted(expected.get("ignore", []))
    assert sorted(vm for vm, _why in b.lost) == sorted(expected.get("lost", []))
    assert len(b.waves) == nwaves
    assert [t.wave for t in b.tasks] == sorted(t.wave for t in b.tasks)
    final = {vm: _placement(v) for vm, v in actual.items() if vm.startswith("lease-")
             and vm not in dict(b.lost)}
    for t in b.tasks:
        apply_task(final, t)
    want = {vm: p for vm, p in desired.items() if p.state != ABSENT and vm not in dict(b.lost)}
    assert final == want


def _placement(value) -> VmPlacement:
    host, state = value
    return VmPlacement(host, {"running": RUNNING, "paused": SUSPENDED}[state])


def test_swap_cycle_is_one_swap_with_task_and_the_stop_pairs_with_the_start():
    b = reconcile({A: ("h1", "running"), B: ("h2", "running")}, {A: run(RUNNING, "h2"), B: run(RUNNING, "h1")},
                  hosts(), "live")
    (swap,) = b.migrate
    assert swap.swap_with == B and swap.migration_type == "live"
    b = reconcile({A: ("h1", "running")}, {B: run(RUNNING, "h1")}, hosts(), "warm")
    assert [(leaver.kind, arriver.kind) for leaver, arriver in b.room] == [("stop", "start")]
    assert [[t.kind for t in wave] for wave in b.waves] == [["stop"], ["start"]]


def test_unequal_swap_goes_through_a_suspension():
    actual = {A: VmPlacement("h1", RUNNING, 2), B: VmPlacement("h2", RUNNING, 1)}
    desired = {A: VmPlacement("h2", RUNNING, 2), B: VmPlacement("h1", RUNNING, 1)}
    b = reconcile(actual, desired, hosts(capacity=2), "warm")
    assert len(b.suspend) == 1 and len(b.resume) == 1 and not any(t.swap_with for t in b.migrate)


def test_a_suspended_image_moves_warm_even_when_running_vms_move_offline():
    b = reconcile({A: ("h1", "paused")}, {A: run(SUSPENDED, "h2")}, hosts(), "offline")
    assert [(t.kind, t.migration_type) for t in b.tasks] == [("migrate", "warm")]


def test_suspended_without_an_image_is_lost_and_no_room_is_lost_too():
    b = reconcile({}, {A: run(SUSPENDED, "h1")}, hosts(), "warm")
    assert [vm for vm, _ in b.lost] == [A] and not b.tasks
    b = reconcile({}, {A: run(RUNNING, "h1"), B: run(RUNNING, "h1")}, hosts(), "warm")
    assert len(b.start) == 1 and len(b.lost) == 1 and "no room" in b.lost[0][1]


# -------------------------------------------------------------------------------------------- safety property

HOST_NAMES = ("h1", "h2", "h3", "h4")


@st.composite
def scenarios(draw):
    """A feasible actual state and a feasible plan on 2-4 hosts with small capacities and VM sizes."""
    nhosts = draw(st.integers(2, 4))
    names_ = HOST_NAMES[:nhosts]
    cap = {h: draw(st.integers(1, 4)) for h in names_}
    nvms = draw(st.integers(0, 8))
    sizes = [draw(st.integers(1, 2)) for _ in range(nvms)]

    def placement():
        used = dict.fromkeys(names_, 0)
        out = {}
        for i, size in enumerate(sizes):
            state = draw(st.sampled_from([RUNNING, SUSPENDED, ABSENT]))
            if state == ABSENT:
                continue
            host = draw(st.sampled_from(names_))
            if state == RUNNING:
                if used[host] + size > cap[host]:
                    continue
                used[host] += size
            out[vm_name(i + 1, 1)] = VmPlacement(host, state, size)
        return out

    actual, desired = placement(), placement()
    # a suspended plan needs an image somewhere: keep only those that exist
    desired = {vm: p for vm, p in desired.items() if p.state != SUSPENDED or vm in actual}
    mtype = draw(st.sampled_from(["live", "warm", "offline"]))
    return {h: HostInfo(h, {"vcpus": c}) for h, c in cap.items()}, actual, desired, mtype


def usage(state: dict[str, VmPlacement], host: str) -> int:
    return sum(p.vcpus for p in state.values() if p.host == host and p.state == RUNNING)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(scenarios())
def test_waves_never_overload_a_host_and_end_in_the_plan(scenario):
    hosts_, actual, desired, mtype = scenario
    b = reconcile(actual, desired, hosts_, mtype)
    assert not b.lost, b.lost
    state = dict(actual)
    for wave in b.waves:
        # within a wave tasks run in any order: every arrival may land before any departure (a swap-with
        # exchanges two equal VMs in one task: it never holds both on one host)
        peak = dict(state)
        for t in wave:
            moving = t.kind == "migrate" and state[t.vm].state == RUNNING and t.swap_with is None
            if t.kind in ("start", "resume") or moving:
                target = t.host if t.kind != "migrate" else t.destination
                peak[f"{t.vm}@arrive"] = VmPlacement(target, RUNNING, t.vcpus)
        for h, info in hosts_.items():
            assert usage(peak, h) <= info.capacity["vcpus"], (h, wave)
        for t in wave:
            apply_task(state, t)
        for h, info in hosts_.items():
            assert usage(state, h) <= info.capacity["vcpus"]
    assert state == {vm: p for vm, p in desired.items() if p.state != ABSENT}


# ------------------------------------------------------------------------------------ the quickstart, end to end

def quickstart_rows():
    import io

    from optlease.eventlog import EventLog
    from optlease.engine.run import apply_trace_options, load_workload, site_of
    from optlease.engine.simulator import Simulator
    from optlease.formats.config import load_config
    from optlease.reconcile import rows_of_leases
    from optlease.scheduling.options import SchedulingOptions
    from optlease.scheduling.policies import Policies

    from conftest import INSTANCES
    cfg = load_config(INSTANCES / "quickstart" / "quickstart.conf")
    opts = SchedulingOptions.from_config(cfg)
    _, workload = load_workload(cfg)
    sim = Simulator(site_of(cfg, workload), apply_trace_options(cfg, workload.requests), opts,
                    Policies(opts.policy_admission, opts.policy_preemption, opts.policy_host_selection),
                    EventLog(cfg.get("simulation", "starttime"), "INFO", io.StringIO()))
    return rows_of_leases(sim.run().leases)


def test_the_quickstart_plan_walked_round_by_round():
    """Lease 1 runs on node 1, is suspended for the AR (lease 2, 4 nodes, one of them node 1), and resumes when the
    AR's VM on node 1 has stopped: the stop and the resume are paired, in two waves."""
    rows = quickstart_rows()
    host_of = {n: f"node{n}" for n in range(1, 5)}
    nodes = {h: HostInfo(h, {"vcpus": 1, "memory_mb": 1024}) for h in host_of.values()}
    state: dict[str, VmPlacement] = {}
    seen = []
    for now in (0, 1768, 1800, 3600, 5464):
        b = reconcile(state, desired_state(rows, now, host_of), nodes, "warm")
        assert not b.lost
        seen.append([[(t.kind, t.vm, t.host) for t in wave] for wave in b.waves])
        for t in b.tasks:
            apply_task(state, t)
    L1, L2 = vm_name(1, 1), [vm_name(2, v) for v in range(1, 5)]
    assert seen == [
        [[("start", L1, "node1")]],
        [[("suspend", L1, "node1")]],
        [[("start", L2[3], "node1"), ("start", L2[0], "node2"), ("start", L2[1], "node3"),
          ("start", L2[2], "node4")]],
        [[("stop", L2[3], "node1"), ("stop", L2[0], "node2"), ("stop", L2[1], "node3"), ("stop", L2[2], "node4")],
         [("resume", L1, "node1")]],
        [[("stop", L1, "node1")]],
    ]
