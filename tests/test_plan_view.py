"""Enactment touches only what changed: after every step and cancellation of any request stream (ARs preempting
and suspending best-effort leases, cancellations, leases ending), what the hosts run is exactly where the whole
plan puts every VM, as a pass reading every lease would have made it. A VM the hosts never got round to starting
before its planned end is reported."""
from __future__ import annotations

import io

from hypothesis import HealthCheck, given, settings

from optlease.domain.lease import LeaseState
from optlease.engine.daemon import Manager
from optlease.engine.daemon_site import SimulatedEnactor, site_from_config
from optlease.reconcile import ABSENT, SUSPENDED, desired_state, rows_of_leases
from test_checkpoint import OPS, manager
from test_persist import AR, BE, CONF, FINISHED, IMMEDIATE, run_until, submit


def hosts_match_the_whole_plan(m, started: set[str] | None = None) -> None:
    """What the hosts run is where the whole plan puts every VM. `started`: the VMs a host started and has not
    stopped since (None: every start the plan made was enacted); a VM the plan has suspended that no host started
    for its run has no memory image to keep (nothing of it ran), so it is absent until its resume starts it
    afresh."""
    want = desired_state(rows_of_leases(m.sched.leases.values()), m.last_t, dict(enumerate(m.host_names, 1)))
    want = {vm: (p.host, p.state) for vm, p in want.items()
            if p.state != ABSENT and not (started is not None and p.state == SUSPENDED and vm not in started)}
    have = {vm: (host, "running" if state == "running" else "suspended")
            for vm, (host, state) in m.enactor.running().items()}
    assert have == want, m.last_t


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_what_the_hosts_run_is_the_whole_plan_after_every_change(tmp_path_factory, ops):
    m = manager(tmp_path_factory.mktemp("view"))
    play(m, ops, lambda: hosts_match_the_whole_plan(m))
    m.stop()


def play(m, ops, after) -> None:
    """Play `ops` (drawn from OPS) on the manager, and then two steps of the clock: requests, cancellations of leases
    not yet finished, steps at every planned event up to each step's instant; `after()` after each event and op."""
    t = m.last_t
    for op in ops + [("step", 900), ("step", 3600)]:
        if op[0] == "step":
            t += op[1]
            while (nxt := m.stepper.next_event(m.last_t)) is not None and nxt <= t:
                m.step(nxt)
                after()
            m.step(t)
        elif op[0] == "cancel":
            if op[1] in m.all and m.all[op[1]].state not in FINISHED:
                m.cancel(op[1])
        elif op[0] != "checkpoint":
            xml = {"be": BE, "now": IMMEDIATE}.get(op[0], AR)
            submit(m, xml.format(n=op[1], m=op[2], s=op[3] if op[0] == "ar" else 0))
        after()


class SlowHosts(SimulatedEnactor):
    """Hosts that take every task and never get round to doing any."""

    def submit(self, tasks) -> None:
        self.submitted += len(tasks)


def test_a_vm_whose_start_was_never_enacted_by_its_end_is_reported(tmp_path):
    from optlease.formats.config import parse_config

    out = io.StringIO()
    folder = tmp_path / "slow"
    folder.mkdir()
    cfg = parse_config(CONF.format(db="state.db").replace("mode: simulated", "mode: simulated\nloglevel: INFO"),
                       str(folder / "d.conf"), folder)
    m = Manager(cfg, out, enactor=SlowHosts(site_from_config(cfg)))
    submit(m, BE.format(n=1, m=5))
    m.step(m.now())   # (its arrival: the daemon's clock may have moved on since it was made)
    assert m.enactor.submitted == 1 and "never enacted" not in out.getvalue()
    run_until(m, 600)
    assert m.all[1].state is LeaseState.DONE
    lines = [line for line in out.getvalue().splitlines() if "never enacted" in line]
    assert len(lines) == 1 and "lease-1-vm-1 was planned to run from" in lines[0], lines
    m.stop()
