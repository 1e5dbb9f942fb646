"""Leave before enter, whatever is known about capacity: on every host, a VM that only leaves (stop, suspend) is in
an earlier wave than any VM that arrives (start, resume, migrate in). Hosts that announce no capacity (a migfra
never does) are where this used to break: a resume and the stop that frees its room went out together, resume
first."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from optlease.enact.base import MIGRATE, RESUME, START, STOP, SUSPEND, HostInfo, vm_name
from optlease.reconcile import ABSENT, RUNNING, SUSPENDED, VmPlacement, reconcile

HOSTS = ("h1", "h2", "h3")


def test_a_stop_goes_before_the_resume_it_makes_room_for_on_a_host_of_unknown_size():
    hosts = {"h1": HostInfo("h1", {})}                # no capacity announced
    actual = {vm_name(1, 1): ("h1", "running"), vm_name(2, 1): ("h1", "paused")}
    desired = {vm_name(2, 1): VmPlacement("h1", RUNNING, vcpus=1, memory_mb=1024)}
    b = reconcile(actual, desired, hosts)
    assert [[(t.kind, t.vm) for t in wave] for wave in b.waves] == [[(STOP, vm_name(1, 1))],
                                                                       [(RESUME, vm_name(2, 1))]]


placement = st.one_of(st.just(None), st.tuples(st.sampled_from(HOSTS), st.sampled_from((RUNNING, SUSPENDED))))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(placement, placement), min_size=1, max_size=8),
       st.sampled_from([{}, {"vcpus": 64, "memory_mb": 1 << 20}]))
def test_on_every_host_what_only_leaves_goes_before_what_arrives(vms, capacity):
    hosts = {h: HostInfo(h, dict(capacity)) for h in HOSTS}
    actual, desired = {}, {}
    for i, (have, want) in enumerate(vms, start=1):
        vm = vm_name(i, 1)
        if have is not None:
            actual[vm] = (have[0], "running" if have[1] == RUNNING else "paused")
        desired[vm] = VmPlacement(None, ABSENT) if want is None else VmPlacement(want[0], want[1], 1, 512)
    b = reconcile(actual, desired, hosts)
    for host in HOSTS:
        leave = [t.wave for t in b.tasks if t.kind in (STOP, SUSPEND) and t.host == host]
        enter = [t.wave for t in b.tasks if t.host == host and t.kind in (START, RESUME)
                 or t.kind == MIGRATE and t.destination == host and actual.get(t.vm, ("", ""))[1] == "running"]
        if leave and enter:
            assert max(leave) < min(enter), (host, b.waves)
