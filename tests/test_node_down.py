"""Dead nodes in the scheduler: a node taken out of planning (its host went silent) gets nothing planned on it, its
leases are replanned, and it comes back when its host is heard again; the daemon journals both and replays them."""
from __future__ import annotations

import sqlite3
import time
from dataclasses import replace
from datetime import datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from optlease.domain.site import Site
from optlease.engine.daemon import Manager
from optlease.engine.daemon_site import SimulatedEnactor
from optlease.eventlog import EventLog
from optlease.engine.loop import Stepper, fail, leases_on, node_down, node_up, requeue
from optlease.engine.persist import Store
from optlease.formats.config import parse_config
from optlease.scheduling.leasesched import LeaseScheduler
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.records import Lease

S = LeaseState
VM = {"CPU": 100, "Memory": 1024}


def scheduler(nodes: int = 3, **opts) -> LeaseScheduler:
    site = Site.homogeneous(nodes, {"CPU": 100, "Memory": 1024})
    o = SchedulingOptions(**{"backfilling": "aggressive", "suspension": "all", "suspend_rate": 32.0,
                             "resume_rate": 32.0, **opts})
    return LeaseScheduler(site, o, Policies(o.policy_admission, o.policy_preemption, o.policy_host_selection),
                          EventLog(datetime(2020, 1, 1)))


def lease(sched: LeaseScheduler, i: int, arrival: int = 0, duration: int = 600, vms: int = 1,
          kind: LeaseKind = LeaseKind.BEST_EFFORT, start: int | None = None) -> Lease:
    req = LeaseRequest(id=i, kind=kind, arrival=arrival, duration=duration, vms=tuple(dict(VM) for _ in range(vms)),
                       start=start)
    return Lease(req, {v: sched.table.vector(d) for v, d in enumerate(req.vms, start=1)})


def nodes_of(x: Lease) -> set[int]:
    vmrr = x.last_vmrr()
    return set() if vmrr is None else set(vmrr.mapping.values())


def test_a_down_node_gets_nothing_and_comes_back():
    sched = scheduler(3, backfilling="off")      # a lease that does not fit now waits in the queue
    step = Stepper(sched)
    node_down(sched, 2, 0)
    assert sched.table.nodes == [1, 3] and sched.table.caps[2] == (0, 0)
    leases = [lease(sched, i) for i in (1, 2, 3)]
    step.step(0, leases)
    assert [x.state for x in leases] == [S.ACTIVE, S.ACTIVE, S.QUEUED]
    assert all(2 not in nodes_of(x) for x in leases)
    assert sched.table.free_at(2, 0) == (0, 0) and sched.table.total_free(0) == (0, 0)
    node_up(sched, 2, 60)
    assert sched.table.nodes == [1, 2, 3]
    step.step(60)
    assert leases[2].state is S.ACTIVE and nodes_of(leases[2]) == {2}


def test_leases_on_a_node_are_found_and_replanned_elsewhere():
    sched = scheduler(3)
    step = Stepper(sched)
    be = lease(sched, 1, vms=2)
    ar = lease(sched, 2, kind=LeaseKind.AR, start=600, duration=300)
    step.step(0, [be, ar])
    assert be.state is S.ACTIVE and ar.state is S.SCHEDULED
    dead = sorted(nodes_of(be))[0]
    victims = leases_on(sched, dead)
    assert be in victims
    for x in victims:
        if x.kind is LeaseKind.BEST_EFFORT:
            requeue(sched, x, 30)
        else:
            fail(sched, x, 30, f"node {dead} is down")
    node_down(sched, dead, 30)
    assert not leases_on(sched, dead)
    step.step(30)
    assert be.state is S.ACTIVE and dead not in nodes_of(be) and len(nodes_of(be)) == 2
    assert be.requeues == 1


def test_a_lease_that_only_fits_with_the_down_node_waits_for_it():
    sched = scheduler(2)
    step = Stepper(sched)
    node_down(sched, 1, 0)
    big = lease(sched, 1, vms=2)
    step.step(0, [big])
    assert big.state is S.QUEUED                       # accepted (the site can hold it), but not planned
    step.step(10)
    assert big.state is S.QUEUED
    node_up(sched, 1, 20)
    step.step(20)
    assert big.state is S.ACTIVE and nodes_of(big) == {1, 2}


# ---------------------------------------------------------------------------------------------- hypothesis
@st.composite
def scenarios(draw):
    nodes = draw(st.integers(2, 4))
    n = draw(st.integers(1, 10))
    reqs = []
    for i in range(1, n + 1):
        kind = draw(st.sampled_from([LeaseKind.BEST_EFFORT, LeaseKind.BEST_EFFORT, LeaseKind.AR]))
        arrival = draw(st.integers(0, 20)) * 60
        start = arrival + draw(st.integers(1, 30)) * 60 if kind is LeaseKind.AR else None
        reqs.append((i, kind, arrival, draw(st.integers(1, 40)) * 60, draw(st.integers(1, nodes)), start))
    events = draw(st.lists(st.tuples(st.integers(0, 60).map(lambda m: m * 60), st.integers(1, nodes),
                                     st.booleans()), max_size=8))
    opts = draw(st.fixed_dictionaries({"backfilling": st.sampled_from(["off", "aggressive", "conservative"]),
                                       "migration": st.sampled_from(["no", "yes"]),
                                       "policy_preemption": st.sampled_from(["no-preemption",
                                                                             "ar-preempts-everything"])}))
    return nodes, reqs, sorted(events), opts


def no_reservation_on_down_nodes(sched: LeaseScheduler, down: set[int]) -> None:
    for rr in sched.table.reservations:
        if rr.state in ("scheduled", "active"):
            on = set(rr.mapping.values()) | set(rr.demand)
            assert not on & down, f"{rr} on down nodes {on & down}"
    for n in sched.table.nodes:       # and no node that is up is over its capacity
        prof, cap = sched.table.profiles[n], sched.table.caps[n]
        assert all(all(u <= c for u, c in zip(use, cap)) for use in prof.u)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_down_and_up_events_never_place_on_a_down_node(scenario):
    nodes, reqs, events, opts = scenario
    sched = scheduler(nodes, **opts)
    step = Stepper(sched)
    leases = [lease(sched, i, arrival, duration, vms, kind, start) for i, kind, arrival, duration, vms, start in reqs]
    times = sorted({x.req.arrival for x in leases} | {t for t, _, _ in events} | {t + 1 for t, _, _ in events})
    down: set[int] = set()
    t = 0
    while times and t <= 200 * 60:
        t = times.pop(0)
        for et, node, goes_down in events:
            if et != t:
                continue
            if goes_down and node not in down:
                for x in leases_on(sched, node):
                    if x.kind is LeaseKind.BEST_EFFORT and x.state in (S.ACTIVE, S.SCHEDULED):
                        requeue(sched, x, t)
                    else:
                        fail(sched, x, t, "down")
                node_down(sched, node, t)
                down.add(node)
            elif not goes_down and node in down:
                node_up(sched, node, t)
                down.discard(node)
        step.step(t, [x for x in leases if x.req.arrival == t])
        assert sched.table.down == down
        no_reservation_on_down_nodes(sched, down)
        nxt = step.next_event(t)
        if nxt is not None and nxt not in times:
            times.append(nxt)
            times.sort()


# ------------------------------------------------------------------------------------- the daemon's side
CONF = """[general]
mode: simulated
persistence-file: {db}
lease-failure-handling: cancel
[scheduling]
backfilling: aggressive
suspension: all
suspend-rate: 32
resume-rate: 32
wakeup-interval: 60
[simulation]
clock: real
resources: {nodes} CPU:100 Memory:1024
imagetransfer-bandwidth: 100
[accounting]
"""


class Hosts(SimulatedEnactor):
    """The simulated enactor, with hosts that can go silent (mode fast's view of them, without the broker)."""

    simulated = False

    def __init__(self, site: Site) -> None:
        super().__init__(site)
        self.silent: set[str] = set()

    def hosts(self):
        return {name: replace(info, alive=name not in self.silent) for name, info in super().hosts().items()}

    def running(self):
        return {vm: where for vm, where in super().running().items() if where[0] not in self.silent}


def make(tmp_path):
    cfg = parse_config(CONF.format(db=tmp_path / "state.db", nodes=3), str(tmp_path / "d.conf"), tmp_path)
    site = Site.homogeneous(3, {"CPU": 100, "Memory": 1024})
    enactor = Hosts(site)
    return Manager(cfg, None, enactor), enactor


def be_request(i, arrival):
    return LeaseRequest(id=i, kind=LeaseKind.BEST_EFFORT, arrival=arrival, duration=3600, vms=(dict(VM),))


def ar_request(i, arrival):
    return LeaseRequest(id=i, kind=LeaseKind.AR, arrival=arrival, duration=600, vms=(dict(VM),), start=arrival + 7200)


def test_the_daemon_takes_a_silent_host_out_requeues_and_journals(tmp_path):
    m, hosts = make(tmp_path)
    try:
        be = m.submit(be_request)
        ar = m.submit(ar_request)
        m.step(m.now())
        lease_be, lease_ar = m.all[be], m.all[ar]
        assert lease_be.state is S.ACTIVE and lease_ar.state is S.SCHEDULED
        dead = m.host(sorted(nodes_of(lease_be))[0])
        node = m.host_names.index(dead) + 1
        hosts.silent.add(dead)
        with m.lock:
            m._enact()
        assert node in m.sched.table.down
        assert lease_be.state is S.QUEUED and lease_be.requeues == 1
        if node in nodes_of(lease_ar):
            assert lease_ar.state is S.FAILED and "went down" in lease_ar.reason
        m.step(m.now())
        assert lease_be.state is S.ACTIVE and node not in nodes_of(lease_be)
        events = [k for _, k, _ in m.store.load().events]
        assert "down" in events and events.index("requeue") < events.index("down")
    finally:
        m.stop()
    # a restart replays the node down: nothing is planned there while the host is still silent
    m, hosts = make(tmp_path)
    try:
        assert m.sched.table.down == {node}
        assert m.all[be].state is S.ACTIVE and node not in nodes_of(m.all[be])
        hosts.silent.add(dead)
        with m.lock:
            m._enact()
        assert m.sched.table.down == {node}
        hosts.silent.clear()                       # heard again: back in planning, journaled
        with m.lock:
            m._enact()
        assert not m.sched.table.down
        assert [k for _, k, _ in m.store.load().events][-1] == "up"
    finally:
        m.stop()
    m, _ = make(tmp_path)
    try:
        assert not m.sched.table.down and not m.notes[:-1]
    finally:
        m.stop()


def test_a_schema_2_journal_is_upgraded(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript("""CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema', '2'), ('epoch', '1000');
        CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, t INTEGER NOT NULL,
                             kind TEXT NOT NULL CHECK (kind IN ('request', 'cancel', 'step', 'fail', 'requeue')),
                             lease_id INTEGER);
        INSERT INTO events (t, kind, lease_id) VALUES (0, 'step', NULL), (5, 'requeue', 1);""")
    db.commit()
    db.close()
    store = Store(str(path))
    store.add_node_event(7, "down", 2)
    assert store.load().events == [(0, "step", None), (5, "requeue", 1), (7, "down", 2)]
    store.close()
    assert Store(str(path)).load().epoch == 1000


def test_a_schema_5_journal_is_upgraded_and_takes_defer_events(tmp_path):
    """Schema 6 lets the events table hold catch-up's `defer`: a schema-5 file keeps its rows, nodes included."""
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript("""CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema', '5'), ('epoch', '1000');
        CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, t INTEGER NOT NULL,
                             kind TEXT NOT NULL CHECK (kind IN ('request', 'cancel', 'step', 'fail', 'requeue',
                                                                'down', 'up')),
                             lease_id INTEGER, node INTEGER);
        INSERT INTO events (t, kind, lease_id, node) VALUES (0, 'step', NULL, NULL), (5, 'down', NULL, 3);""")
    db.commit()
    db.close()
    store = Store(str(path))
    store.add_event(9, "defer", Lease(LeaseRequest(id=4, kind=LeaseKind.BEST_EFFORT, arrival=0, duration=60,
                                                    vms=({"CPU": 100},)), {}))
    assert store.load().events == [(0, "step", None), (5, "down", 3), (9, "defer", 4)]
    store.close()
    assert sqlite3.connect(path).execute("SELECT value FROM meta WHERE key='schema'").fetchone() == ("7",)


def test_a_host_never_heard_is_not_taken_down(tmp_path):
    m, hosts = make(tmp_path)
    try:
        name = m.host_names[0]
        hosts._hosts[name].last_seen = 0.0
        hosts.silent.add(name)
        with m.lock:
            m._enact()
        assert not m.sched.table.down
        hosts._hosts[name].last_seen = time.time()
        with m.lock:
            m._enact()
        assert m.sched.table.down == {1}
    finally:
        m.stop()
