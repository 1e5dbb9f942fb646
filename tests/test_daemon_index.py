"""The daemon's indexes change no decision: a daemon that reads what changed from its indexes (the leases by state,
the hosts' reports as they change, the hosts as of their last change) and one that walks every lease and host at
each step and pass, driven through the same random sequences (requests of every kind, late and missed steps,
cancellations, failed tasks, hosts going silent and coming back), journal the same rows, show the same leases to
clients, send the same tasks and log the same lines. A daemon whose index misses a change is caught."""
from __future__ import annotations

import io
import random
import sqlite3
from dataclasses import replace

import pytest

from optlease.domain.lease import LeaseKind, LeaseRequest
from optlease.domain.site import Site
from optlease.enact.base import TaskOutcome
from optlease.engine.daemon import Manager
from optlease.engine.daemon_site import SimulatedEnactor
from optlease.engine.lease_index import LeaseIndex
from optlease.engine.loop import leases_on
from optlease.engine.persist import Store
from optlease.formats.config import parse_config

from test_node_down import CONF     # the daemon of both: simulated hosts, real clock, SQLite state

EPOCH = 1_600_000_000       # long past: every step after its instant is late on the real clock too
NODES = 4


class Hosts(SimulatedEnactor):
    """Simulated hosts as mode fast sees them: a host can go silent (its VMs' last report stays, as an agent's
    does) and come back, and the starts of chosen leases fail."""

    simulated = False

    def __init__(self, site: Site) -> None:
        super().__init__(site)
        self.silent: set[str] = set()
        self.failing: set[int] = set()       # leases whose start tasks fail
        self.version = 0
        self.sent: list = []                  # every task submitted, in order

    def submit(self, tasks) -> None:
        self.sent.extend(replace(t, id="") for t in tasks)
        ok = [t for t in tasks if not (t.kind == "start" and t.lease_id in self.failing)]
        super().submit(ok)
        self._outcomes.extend(TaskOutcome(t, False, "refused by the test host") for t in tasks if t not in ok)

    def hosts(self):
        return {name: replace(info, alive=name not in self.silent) for name, info in super().hosts().items()}

    def hosts_version(self) -> int:
        return self.version

    def silence(self, name: str, silent: bool) -> None:
        (self.silent.add if silent else self.silent.discard)(name)
        self.version += 1


class LosesADelta(Hosts):
    """Drops the first change of a report it hands over: the indexed daemon's copy of the reports goes stale."""

    lost = False

    def running_delta(self):
        delta = super().running_delta()
        if delta and not self.lost:
            self.lost = True
            delta.pop(sorted(delta)[0])
        return delta

    # defined here too: the daemon trusts a delta or a version only from the class that defines running() / hosts()
    def running(self):
        return super().running()

    def hosts(self):
        return super().hosts()

    def hosts_version(self) -> int:
        return self.version


class RecordsTheNewState(LeaseIndex):
    """An index that records the state a lease has after a change as the state it had before the step."""

    def note(self, leases, in_system) -> None:
        leases = list(leases)
        super().note(leases, in_system)
        for lease in leases:
            if self._prior is not None and self._prior.get(lease.id) is not None:
                self._prior[lease.id] = lease.state


class ForgetsCancellations(LeaseIndex):
    """An index that is not told of cancelled leases."""

    def note(self, leases, in_system) -> None:
        super().note([lease for lease in leases if lease.state.value != "cancelled"], in_system)


class NeverTellsOfHosts(Hosts):
    """Hosts whose version never changes: a host going silent is not seen by a daemon that trusts the version."""

    def hosts_version(self) -> int:
        return 0

    def hosts(self):
        return super().hosts()


class FilesOnlyTheFirstNode(LeaseIndex):
    """An index that files each lease under the first node it names only: a host going silent misses leases."""

    def _file(self, lease_id, nodes) -> None:
        super()._file(lease_id, frozenset(sorted(nodes)[:1]))


class OverlooksHostsThatCameOrWent(Manager):
    """A daemon whose pass, when hosts come or go, looks only at the VMs whose plan or report changed."""

    def _candidates(self, changed, running, alive, down):
        return changed if self._last_hosts else super()._candidates(changed, running, alive, down)


BROKEN = {"stale reports": {"enactor_class": LosesADelta}, "hosts never said to change": {"enactor_class":
          NeverTellsOfHosts}, "states after the change": {"index_class": RecordsTheNewState},
          "cancellations not noted": {"index_class": ForgetsCancellations},
          "leases filed under one node": {"index_class": FilesOnlyTheFirstNode},
          "hosts that came or went overlooked": {"manager_class": OverlooksHostsThatCameOrWent}}


def make(tmp_path, name: str, indexed: bool, enactor_class=Hosts, index_class=LeaseIndex, manager_class=Manager):
    folder = tmp_path / name
    folder.mkdir(parents=True)
    db = folder / "state.db"
    store = Store(str(db))
    store.set_epoch(EPOCH)
    store.close()
    cfg = parse_config(CONF.format(db=db, nodes=NODES), str(folder / "d.conf"), folder)
    out = io.StringIO()
    m = manager_class(cfg, out, enactor_class(Site.homogeneous(NODES, {"CPU": 100, "Memory": 1024})), indexed=indexed)
    m.index = index_class()
    m.index.rebuild(m.sched.leases)
    return m, out


def request(rng: random.Random, kind: str):
    vms = tuple({"CPU": rng.choice((25, 50, 100)), "Memory": 256} for _ in range(rng.randint(1, NODES)))
    duration = rng.choice((60, 300, 900, 3600))
    lead = rng.choice((30, 120, 600))       # an AR's start, after its arrival

    def make_request(i: int, arrival: int) -> LeaseRequest:
        if kind == "ar":
            return LeaseRequest(id=i, kind=LeaseKind.AR, arrival=arrival, duration=duration, vms=vms,
                                start=arrival + lead, preemptible=False)
        if kind == "im":
            return LeaseRequest(id=i, kind=LeaseKind.IMMEDIATE, arrival=arrival, duration=duration, vms=vms,
                                preemptible=False)
        return LeaseRequest(id=i, kind=LeaseKind.BEST_EFFORT, arrival=arrival, duration=duration, vms=vms,
                            preemptible=True)
    return make_request


def state(m: Manager, out: io.StringIO) -> dict:
    """Everything a user or a restart sees of a daemon."""
    db = sqlite3.connect(m.store.path)
    tables = {t: db.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
              for t in ("requests", "events", "leases", "reservations")}
    db.close()
    tables["events"] = [row[1:] for row in tables["events"]]
    return {"tables": tables, "views": [m.views.rendered(v) for v in m.views.listing(True)],
            "tasks": list(m.enactor.sent), "log": out.getvalue(), "down": sorted(m.sched.table.down),
            "last_t": m.last_t}


def run(ms: list, seed: int, ops: int = 70) -> str | None:
    """Drive the daemons through one random sequence; the first operation after which they differ, or None."""
    rng = random.Random(seed)
    now = [1]
    for m, _ in ms:
        m.clock.now = lambda: now[0]
    for op in range(ops):
        what = rng.choices(("request", "advance", "catch-up", "cancel", "fail", "silence", "pass"),
                           (6, 4, 1, 1, 1, 1, 2))[0]
        kind = rng.choices(("be", "ar", "im"), (5, 2, 1))[0]
        pick = rng.random()
        host = rng.randrange(NODES)
        if what in ("advance", "catch-up"):
            now[0] += rng.choice((1, 30, 200, 900))
        for m, _ in ms:
            if what == "request":
                m.submit(request(random.Random(op), kind))
                m.step(m.now())
            elif what in ("advance", "catch-up"):
                # the loop's steps, late: each planned instant before the new now, then now
                while (t := m.next_instant()) is not None and t < now[0]:
                    m.step(t, catching_up=what == "catch-up")
                m.step(now[0])
            elif what == "cancel":
                live = sorted(m.sched.leases)
                if live:
                    m.cancel(live[int(pick * len(live))])
            elif what == "fail":
                m.enactor.failing.add(m.next_id)
            elif what == "silence":
                name = m.host_names[host]
                m.enactor.silence(name, name not in m.enactor.silent)
                with m.lock:
                    m._enact()
            else:
                with m.lock:
                    m._enact(only_on_news=pick < 0.5)
        states = [state(m, out) for m, out in ms]
        for key in states[0]:
            if states[0][key] != states[1][key]:
                return f"operation {op} ({what}): {key} differ"
        wrong = [why for m, _ in ms if m.indexed for why in stale(m)]
        if wrong:
            return f"operation {op} ({what}): {wrong[0]}"
    return None


def stale(m: Manager) -> list[str]:
    """What the indexed daemon's indexes say that a walk over every lease and host does not."""
    out = []
    if m.index.state_of != m._states():
        out.append("the lease index is not the leases' states")
    if any(m.index.state_of.get(i) is not state for state, ids in m.index.with_state.items() for i in ids):
        out.append("the leases by state are not the leases' states")
    for node in m.site.node_ids:
        if {lease.id for lease in leases_on(m.sched, node)} - m.index.on_node.get(node, set()):
            out.append(f"the leases on node {node} are not all filed under it")
    if m._mirror is not None:
        # the copy lags by the changes the next pass takes (the tasks the last pass sent)
        taken = lambda reports: {vm: w for vm, w in reports.items() if vm not in m.enactor._running.changed}  # noqa
        if taken(m._mirror) != taken(m.enactor.running()):
            out.append("the copy of the reports is not what the hosts report")
    return out


@pytest.mark.parametrize("seed", range(4))
def test_the_indexed_daemon_decides_journals_and_answers_as_the_walking_one(tmp_path, seed):
    ms = [make(tmp_path, "indexed", True), make(tmp_path, "walking", False)]
    try:
        assert run(ms, seed) is None
    finally:
        for m, _ in ms:
            m.stop()


def test_the_sequences_reach_late_steps_failures_and_hosts_going_down(tmp_path):
    ms = [make(tmp_path, "indexed", True), make(tmp_path, "walking", False)]
    try:
        assert run(ms, 0, ops=120) is None
        log = ms[0][1].getvalue()
        events = {kind for (kind,) in ms[0][0].store.db.execute("SELECT kind FROM events")}
    finally:
        for m, _ in ms:
            m.stop()
    assert " late" in log and "is down" in log and "is back" in log, log[-2000:]
    assert {"cancel", "fail", "step", "down", "up"} <= events, events


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_daemon_whose_index_misses_a_change_is_caught(tmp_path, broken):
    """The comparison can fail: an indexed daemon that loses one report change, that is never told that the hosts
    changed, whose lease index records the states after a step's changes or is not told of cancellations or files
    a lease under one of its nodes only, or whose pass overlooks the VMs of hosts that came or went, parts from the
    walking one (in what it does, or in what its indexes say against a walk)."""
    caught = []
    for seed in range(4):
        folder = tmp_path / f"{seed}"
        ms = [make(folder, "indexed", True, **BROKEN[broken]), make(folder, "walking", False)]
        try:
            caught.append(run(ms, seed, ops=200))     # (each stops at the first difference)
        finally:
            for m, _ in ms:
                m.stop()
    assert all(caught), caught


@pytest.mark.parametrize("unindexed", [False, True], ids=["indexed, forked checkpoints", "walking, inline ones"])
def test_the_scale_bench_prints_a_step_cost_per_count_of_leases(unindexed):
    """bench_daemon's scale mode measures a step, an enactment pass, a host going silent and a checkpoint at each
    count of `--step-at`, and create_lease while a checkpoint is written (JSON)."""
    import json
    import subprocess
    import sys

    from conftest import REPO

    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_daemon.py"), "--mode", "scale", "--hosts",
                          "20", "--in-system", "120", "--requests", "8", "--fill-batch", "50", "--step-at", "30,60",
                          "--step-repeats", "4"] + (["--unindexed", "--inline-checkpoint"] if unindexed else []),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    # each count is reached by the fill, then 5 more leases are requested by the measured steps
    assert [c["leases_in_system"] for c in figures["step_costs"]] == [30, 60, 120]
    assert figures["indexed"] is not unindexed and figures["failed_calls"] == {}
    for cost in figures["step_costs"]:
        assert set(cost) >= {"step_one_request_ms", "step_nothing_new_ms", "late_step_nothing_new_ms",
                             "idle_enactment_pass_ms", "step_one_request_new_instant_ms", "checkpoint_cpu_s"}
        assert 0 < cost["step_nothing_new_ms"]["median"] <= cost["step_nothing_new_ms"]["max"]
        assert cost["host_down_pass_ms"] > 0 and cost["host_back_pass_ms"] > 0
        assert set(cost["checkpoint"]) >= ({"inline_cpu_s"} if unindexed else {"fork_ms", "child_cpu_s", "commit_ms"})
    during = figures["while_checkpointing"]
    assert during["committed"] and during["calls_during_checkpoint"] > 0
    assert figures["checkpoints"] == ("inline" if unindexed else "forked")


def test_the_scale_bench_refuses_a_count_that_is_not_a_whole_number():
    import subprocess
    import sys

    from conftest import REPO

    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_daemon.py"), "--mode", "scale",
                          "--step-at", "10,x"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "argument --step-at" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_the_reports_name_every_change_with_its_new_value():
    """What an enactor hands over as changed, applied to a copy, gives what it reports, however it was changed."""
    from optlease.enact.base import Reported

    reports, copy = Reported(), {}

    def follow() -> None:
        for vm, where in reports.take_delta().items():
            if where is None:
                copy.pop(vm, None)
            else:
                copy[vm] = where
        assert copy == reports

    changes = [lambda r: r.__setitem__("a", ("h1", "running")), lambda r: r.update(b=("h2", "running")),
               lambda r: r.update({"a": ("h1", "saved")}), lambda r: r.setdefault("c", ("h3", "running")),
               lambda r: r.pop("b"), lambda r: r.__delitem__("a"), lambda r: r.popitem(),
               lambda r: r.update(d=("h1", "running"), e=("h2", "paused")), lambda r: r.__ior__({"f": ("h3", "saved")}),
               lambda r: r.clear()]
    for change in changes:
        change(reports)
        follow()
    assert reports.take_delta() == {}
