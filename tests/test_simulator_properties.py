"""Safety of every schedule the simulator writes, on random workloads, sites and options (hypothesis):
capacity is never exceeded, accepted ARs start exactly on time and are never interrupted, immediate leases start
on arrival, and nothing is lost: every lease ends done or rejected, and done leases ran exactly their real time
(also where best-effort bookings hold run-time estimates that leases run past)."""
from __future__ import annotations

import io
from datetime import datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optlease.checker import check_schedule
from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from optlease.domain.site import Site
from optlease.eventlog import EventLog
from optlease.engine.simulator import Simulator
from optlease.formats.schedule_json import schedule_document
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.snapshot import Weights

ORIGIN = datetime(2006, 11, 25, 13, 0, 0)

sites = st.lists(st.tuples(st.sampled_from([100, 200, 400]), st.sampled_from([1024, 2048, 4096]),
                           st.sampled_from([0, 10])), min_size=1, max_size=5).map(
    lambda nodes: Site(("CPU", "Memory", "Disk"),
                       tuple({"CPU": c, "Memory": m, **({"Disk": d} if d else {})} for c, m, d in nodes)))

vm = st.fixed_dictionaries({"CPU": st.sampled_from([25, 50, 100]), "Memory": st.sampled_from([256, 512, 1024])})


@st.composite
def requests(draw):
    n = draw(st.integers(1, 12))
    out = []
    for i in range(1, n + 1):
        kind = draw(st.sampled_from(list(LeaseKind)))
        arrival = draw(st.integers(0, 120)) * 60
        duration = draw(st.integers(1, 120)) * 60 + draw(st.sampled_from([0, 7]))
        real = draw(st.one_of(st.none(), st.integers(1, duration)))
        start = arrival + draw(st.integers(0, 90)) * 60 if kind is LeaseKind.AR else None
        vms = tuple(draw(st.lists(vm, min_size=1, max_size=3)))
        out.append(LeaseRequest(id=i, kind=kind, arrival=arrival, duration=duration, vms=vms,
                                preemptible=draw(st.booleans()), start=start, real_duration=real,
                                extra={"user": draw(st.sampled_from(["a", "b"]))}))
    return out


options = st.builds(
    SchedulingOptions,
    backfilling=st.sampled_from(["off", "aggressive", "conservative", "intermediate"]),
    backfilling_reservations=st.just(2),
    suspension=st.sampled_from(["none", "serial-only", "all"]),
    suspend_rate=st.sampled_from([16.0, 32.0, 100.0]), resume_rate=st.sampled_from([16.0, 32.0, 100.0]),
    exclusion=st.sampled_from(["local", "global"]),
    threshold_factor=st.integers(0, 2),
    override_suspend=st.sampled_from([None, 0, 5]),
    migration=st.sampled_from(["no", "yes", "yes-notransfer"]),
    shutdown_time=st.sampled_from([0, 5]), enactment_overhead=st.sampled_from([0, 1, 2]),
    policy_preemption=st.sampled_from(["no-preemption", "ar-preempts-everything"]),
    policy_host_selection=st.sampled_from(["greedy", "no-policy"]),
    runtime_estimate=st.sampled_from(["requested", "user-history"]),
    # mapper cpsat only: its user-facing options (weights as weight-rejected 0 / weight-preemption 0 would set them)
    solver_suspend=st.sampled_from(["no", "for-waiting"]),
    solver_work_limit=st.sampled_from([0.01, 0.05]),
    weights=st.sampled_from([Weights(), Weights(rejected=0), Weights(preemptions=0)]),
)


def run(site, reqs, opts):
    log = EventLog(ORIGIN, "INFO", io.StringIO())
    policies = Policies(opts.policy_admission, opts.policy_preemption, opts.policy_host_selection)
    return Simulator(site, reqs, opts, policies, log).run()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(site=sites, reqs=requests(), opts=options)
def test_schedules_are_safe_and_nothing_is_lost(site, reqs, opts):
    result = run(site, reqs, opts)
    doc = schedule_document(result.site, result.leases, ORIGIN)
    assert [str(v) for v in check_schedule(doc)] == []
    for lease in result.leases:
        assert lease.state in (LeaseState.DONE, LeaseState.REJECTED), (lease.id, lease.state)
        if lease.state is LeaseState.REJECTED:
            assert lease.reason
        if lease.kind is LeaseKind.BEST_EFFORT and lease.state is LeaseState.REJECTED:
            assert "never fit" in lease.reason  # best-effort leases wait; they are refused only if impossible
    assert len(result.leases) == len(reqs)


def test_a_lease_that_can_never_fit_is_rejected_with_its_reason():
    site = Site.parse_resources("2 CPU:100 Memory:1024")
    reqs = [LeaseRequest(1, LeaseKind.BEST_EFFORT, 0, 600, ({"CPU": 100, "Memory": 1024},) * 3),
            LeaseRequest(2, LeaseKind.BEST_EFFORT, 0, 600, ({"CPU": 100, "Memory": 4096},)),
            LeaseRequest(3, LeaseKind.BEST_EFFORT, 0, 600, ({"CPU": 100, "Memory": 1024},))]
    out = io.StringIO()
    policies = Policies()
    result = Simulator(site, reqs, SchedulingOptions(backfilling="off"), policies,
                       EventLog(ORIGIN, "INFO", out)).run()
    states = {lease.id: lease.state for lease in result.leases}
    assert states == {1: LeaseState.REJECTED, 2: LeaseState.REJECTED, 3: LeaseState.DONE}
    assert "Lease #1 has not been accepted: it can never fit the site" in out.getvalue()
    assert result.end_time == 600  # lease 3 was not held up behind the impossible ones
