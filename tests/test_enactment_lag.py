"""Enactment while tasks are under way: hosts that take their time. A pass plans nothing for a VM with a task under
way (nor for one whose other host is busy), so it never sends a VM a second task before the first has its outcome,
and never takes a VM whose suspension is still going on for one whose image is lost. Suspended leases with
migration on move their images between hosts (a resume may land elsewhere), which is where a pass used to see a
lease's images planned on a host it looked at, coming from one it did not, and fail the lease; and where a VM's start
was never sent before its lease was suspended, it failed the lease for an image that never existed."""
from __future__ import annotations

import io
import random

from hypothesis import HealthCheck, example, given, settings, strategies as st

from optlease.domain.lease import LeaseState
from optlease.engine.daemon import Manager
from optlease.engine.daemon_site import SimulatedEnactor, site_from_config
from optlease.formats.config import parse_config
from test_checkpoint import OPS
from test_persist import CONF
from test_plan_view import hosts_match_the_whole_plan, play

MIGRATING = CONF.replace("backfilling: aggressive", "backfilling: conservative\nmigration: yes") \
    .replace("mode: simulated", "mode: simulated\nloglevel: INFO")


class LaggingHosts(SimulatedEnactor):
    """Hosts that do each batch of tasks only when the test says so; until then its VMs and hosts are under way."""

    simulated = False        # a VM the reconcile step cannot place is lost, as with real hosts

    def __init__(self, site) -> None:
        super().__init__(site)
        self.batches: list[list] = []
        self.twice: list[str] = []           # tasks sent for a VM that already had one under way
        self.started: set[str] = set()       # the VMs a host started and has not stopped since

    def pending(self) -> tuple[set[str], set[str]]:
        tasks = [t for batch in self.batches for t in batch]
        return ({h for t in tasks for h in (t.host, t.destination) if h},
                {v for t in tasks for v in (t.vm, t.swap_with) if v})

    def submit(self, tasks) -> None:
        busy = self.pending()[1]
        self.twice.extend(f"{t.kind} {t.vm}" for t in tasks if t.vm in busy)
        self.batches.append(list(tasks))

    def settle(self, batches: int) -> None:
        done, self.batches = self.batches[:batches], self.batches[batches:]
        for batch in done:
            for t in batch:
                if t.kind == "start":
                    self.started.add(t.vm)
                elif t.kind == "stop":
                    self.started.discard(t.vm)
            super().submit(batch)


def manager(folder) -> tuple[Manager, io.StringIO]:
    folder.mkdir(parents=True, exist_ok=True)
    out = io.StringIO()
    cfg = parse_config(MIGRATING.format(db="state.db"), str(folder / "d.conf"), folder)
    return Manager(cfg, out, enactor=LaggingHosts(site_from_config(cfg))), out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, seed=st.integers(0, 2**32 - 1))
# Lease 3's third VM is planned on a node whose host is still busy with lease 1's tasks, so its start is never sent
# before an AR suspends the lease: it has no memory image, and the lease was failed as one whose image was lost.
@example(ops=[("be", 2, 17), ("checkpoint",), ("ar", 2, 1, 34), ("cancel", 3), ("be", 3, 3)], seed=216089)
# Lease 5's four VMs are planned while their hosts are busy; two starts are done late, two never before an AR
# suspends the lease: those two have no image to keep while it waits to resume (the test's own view of the plan
# wanted images of them).
@example(ops=[("be", 1, 1), ("be", 1, 1), ("be", 1, 1), ("be", 1, 3), ("be", 4, 20), ("be", 1, 1), ("be", 1, 40),
              ("ar", 1, 1, 37)], seed=0)
def test_a_pass_leaves_vms_under_way_to_their_tasks(tmp_path_factory, ops, seed):
    m, out = manager(tmp_path_factory.mktemp("lag"))
    rng = random.Random(seed)
    hosts = m.enactor

    def some_tasks_done() -> None:
        hosts.settle(rng.randint(0, len(hosts.batches)))
        m._enact()

    play(m, ops, some_tasks_done)
    for _ in range(20):          # the hosts catch up: every task done, every pass after it finds nothing to do
        hosts.settle(len(hosts.batches))
        m._enact()
        if not hosts.batches:
            break
    log = out.getvalue()
    assert hosts.twice == [], hosts.twice
    assert "no host has its image" not in log and "has been failed" not in log, log[-3000:]
    assert not any(lease.state is LeaseState.FAILED for lease in m.all.values())
    hosts_match_the_whole_plan(m, hosts.started)
    m.stop()
