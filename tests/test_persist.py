"""Persistence: the journal in SQLite replays into a fresh scheduler with every lease in the same state."""
from __future__ import annotations

import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optlease.domain.lease import LeaseState
from optlease.engine.api import parse_lease_xml
from optlease.engine.daemon import Manager
from optlease.engine.persist import Store, request_from_json, request_to_json
from optlease.errors import InputError
from optlease.formats.config import parse_config

CONF = """[general]
mode: simulated
persistence-file: {db}
[scheduling]
suspension: all
suspend-rate: 32
resume-rate: 32
backfilling: aggressive
policy-preemption: ar-preempts-everything
[simulation]
clock: real
resources: 4 CPU:100 Memory:1024
imagetransfer-bandwidth: 100
[accounting]
"""
BE = ('<lease preemptible="true"><nodes><node-set numnodes="{n}"><res type="CPU" amount="100"/>'
      '<res type="Memory" amount="512"/></node-set></nodes><start/><duration time="00:{m:02d}:00"/></lease>')
AR = ('<lease preemptible="false"><nodes><node-set numnodes="{n}"><res type="CPU" amount="100"/>'
      '<res type="Memory" amount="512"/></node-set></nodes><start><exact time="+00:{s:02d}:00"/></start>'
      '<duration time="00:{m:02d}:00"/></lease>')


def manager(tmp_path, db="state.db"):
    cfg = parse_config(CONF.format(db=db), str(tmp_path / "d.conf"), tmp_path)
    return Manager(cfg)


def submit(m, xml):
    return m.submit(lambda i, t: parse_lease_xml(xml, i, t, m.origin, m.site), xml)


def run_until(m, end):
    """Step at every planned event up to `end`, then at `end` (what the real clock does)."""
    while (t := m.stepper.next_event(m.last_t)) is not None and t <= end:
        m.step(t)
    m.step(end)


def states(m):
    return {i: lease.state for i, lease in m.all.items()}


def test_replay_restores_every_lease_and_ids_continue(tmp_path):
    m = manager(tmp_path)
    m.last_t = 0
    submit(m, BE.format(n=4, m=30))
    submit(m, BE.format(n=2, m=20))
    m.step(0)
    submit(m, AR.format(n=2, s=10, m=30))     # preempts the running best-effort lease at t=600
    submit(m, BE.format(n=1, m=5))
    m.step(60)
    run_until(m, 700)
    lid = submit(m, BE.format(n=1, m=5))
    m.cancel(2)
    before = states(m)
    reservations = {i: [(rr.start, rr.end, rr.state) for v in lease.vmrrs for rr in (*v.pre, v, *v.post)]
                    for i, lease in m.all.items()}
    accumulated = {i: lease.accumulated for i, lease in m.all.items()}
    m.stop()

    again = manager(tmp_path)
    assert not [n for n in again.notes if "recorded as" in n]
    assert states(again) == before
    assert before[2] is LeaseState.CANCELLED and before[lid] is LeaseState.NEW
    assert again.all[1].suspensions + again.all[1].requeues == 1 and again.all[3].state is LeaseState.ACTIVE
    assert {i: [(rr.start, rr.end, rr.state) for v in lease.vmrrs for rr in (*v.pre, v, *v.post)]
            for i, lease in again.all.items()} == reservations
    assert {i: lease.accumulated for i, lease in again.all.items()} == accumulated
    assert submit(again, BE.format(n=1, m=1)) == lid + 1
    # the run goes on to the end from the reloaded state
    t = again.last_t
    for _ in range(100):
        t = again.stepper.next_event(t) or t + 1
        again.step(t)
        if not again.sched.leases and not again.inbox:
            break
    assert all(s in (LeaseState.DONE, LeaseState.CANCELLED) for s in states(again).values()), states(again)
    again.stop()


def test_rows_are_committed_with_states(tmp_path):
    m = manager(tmp_path)
    submit(m, BE.format(n=1, m=5))
    m.step(m.now())   # (its arrival: the daemon's clock may have moved on since it was made)
    db = sqlite3.connect(tmp_path / "state.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("SELECT id, state FROM leases").fetchall() == [(1, "active")]
    assert db.execute("SELECT kind, state FROM reservations WHERE lease_id=1").fetchall()[0] == ("vm", "active")
    assert [k for (k,) in db.execute("SELECT kind FROM events ORDER BY seq")] == ["request", "step"]
    m.stop()


def test_in_memory_when_persistence_is_none(tmp_path):
    m = manager(tmp_path, db="none")
    submit(m, BE.format(n=1, m=5))
    m.stop()
    assert not list(tmp_path.glob("*.db"))


def test_request_json_round_trip(tmp_path):
    m = manager(tmp_path, db="none")
    req = parse_lease_xml(AR.format(n=2, s=1, m=2), 7, 30, m.origin, m.site)
    assert request_from_json(request_to_json(req)) == req
    m.stop()


def test_a_persistence_file_in_a_missing_folder_is_one_line(tmp_path):
    from optlease.engine.persist import StoreError

    with pytest.raises(StoreError, match="its folder does not exist") as exc:
        Store(str(tmp_path / "gone" / "state.db"))
    assert "\n" not in str(exc.value) and not (tmp_path / "gone").exists()


def test_schema_version_is_checked(tmp_path):
    Store(str(tmp_path / "x.db")).close()
    db = sqlite3.connect(tmp_path / "x.db")
    db.execute("UPDATE meta SET value='99' WHERE key='schema'")
    db.commit()
    with pytest.raises(ValueError, match="schema 99"):
        Store(str(tmp_path / "x.db"))


@pytest.mark.parametrize("xml, message", [
    ("<lease", "malformed lease XML"),
    ("<nodes/>", "expected <lease>"),
    (BE.format(n=5, m=1), "the site has 4"),
    (BE.format(n=99999999999999, m=1), "far too large"),
    (BE.format(n=0, m=1), "must be positive"),
    (BE.format(n=-1, m=1), "numnodes"),
    (BE.format(n=1, m=0).replace("00:00:00", "00:00:00"), "duration must be positive"),
    (BE.format(n=1, m=1).replace('amount="100"', 'amount="999999999999999"'), "far too large"),
    (BE.format(n=1, m=1).replace('amount="100"', 'amount="101"'), "more than any node has"),
    (BE.format(n=1, m=1).replace('type="CPU"', 'type="GPU"'), "resource type 'GPU'"),
    (BE.format(n=1, m=1).replace("00:01:00", "99999:00:00:00"), "100 years"),
    (AR.format(n=1, s=1, m=1).replace("+00:01:00", "2001-01-01 00:00:00"), "in the past"),
    ('<!DOCTYPE l [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;">]><lease>&b;</lease>', "DOCTYPE"),
    ('<!DOCTYPE l [<!ENTITY x SYSTEM "file:///etc/passwd">]><lease>&x;</lease>', "DOCTYPE"),
])
def test_bad_requests_are_one_line_input_errors(tmp_path, xml, message):
    m = manager(tmp_path, db="none")
    with pytest.raises(InputError, match=message) as exc:
        parse_lease_xml(xml, 1, 0, m.origin, m.site)
    assert "\n" not in str(exc.value)
    m.stop()


CPSAT = CONF.replace("[simulation]", "mapper: cpsat\n[simulation]")


def plan_of(m):
    return {i: [(rr.kind, rr.start, rr.end, rr.state, dict(rr.mapping)) for v in lease.vmrrs
                for rr in (*v.pre, v, *v.post)] for i, lease in m.all.items()}


def test_cpsat_replay_takes_the_journaled_decisions_and_never_solves_again(tmp_path, monkeypatch):
    from optlease.scheduling.cpsat_round import CpsatRound

    cfg = parse_config(CPSAT.format(db="state.db"), str(tmp_path / "d.conf"), tmp_path)
    m = Manager(cfg)
    for n, mins in [(4, 30), (3, 50), (1, 5), (2, 10), (1, 40), (4, 3), (2, 7)]:
        submit(m, BE.format(n=n, m=mins))
    m.step(m.now())
    m.step(m.last_t + 60)
    submit(m, BE.format(n=1, m=2))
    m.step(m.last_t + 60)
    solved = [r for r in m.stepper.planner.records if r.stats.source == "cpsat" and r.changed]
    assert solved, "the scenario must have rounds the solver changed"
    before = plan_of(m)
    m.stop()

    def no_solver(*args, **kw):
        raise AssertionError("replay solved a round again")
    monkeypatch.setattr(CpsatRound, "_plan", no_solver)
    monkeypatch.setattr(CpsatRound, "_complete", no_solver)
    again = Manager(cfg)
    assert plan_of(again) == before
    assert not [n for n in again.notes if "recorded as" in n or "solved again" in n], again.notes
    again.stop()


@pytest.mark.parametrize("checkpoint", [False, True])
def test_a_restart_keeps_the_cpsat_rounds_promises(tmp_path, checkpoint):
    """The promises the rounds made (round_promise: a lease that has waited its run keeps its place in a line) are
    rebuilt by a restart, from a checkpoint or by replaying the journal, in the same order: a daemon that restarts
    keeps the line it would have kept."""
    cfg = parse_config(CPSAT.format(db="state.db"), str(tmp_path / "d.conf"), tmp_path)
    m = Manager(cfg)
    for n, mins in [(4, 30), (3, 5), (2, 4), (4, 3), (1, 2), (3, 3), (2, 6)]:
        submit(m, BE.format(n=n, m=mins))
    run_until(m, m.last_t + 900)
    if checkpoint:
        m.write_checkpoint()
        m.collect_checkpoint(wait=True)
    run_until(m, m.last_t + 60)
    promised = dict(m.stepper.planner._promised)
    assert promised, "the scenario must have promised leases"
    before = plan_of(m)
    m.stop()
    again = Manager(cfg)
    assert dict(again.stepper.planner._promised) == promised
    assert again.stepper.planner._promises_made == m.stepper.planner._promises_made
    assert plan_of(again) == before
    again.stop()


def test_a_failing_step_stops_the_manager_and_nothing_uncommitted_is_served(tmp_path):
    from optlease.engine.atomic import Stopped

    m = manager(tmp_path)
    submit(m, BE.format(n=1, m=5))
    real_step = m.stepper.step

    def broken(now, arrivals=()):
        real_step(now, arrivals)      # the step changes the scheduler, then a bug strikes
        raise RuntimeError("a bug in a round")
    m.stepper.step = broken
    m.start()
    m.wake.set()
    m._thread.join(timeout=10)
    assert not m._thread.is_alive() and m.stopping.is_set()
    assert m.fatal.startswith("the scheduling step at ") and "RuntimeError: a bug in a round" in m.fatal
    assert m.fatal_rc == 1 and "\n" not in m.fatal
    with pytest.raises(Stopped, match="has stopped"):   # the lease is Active in memory, never committed: refused
        with m.lock:
            pass
    m.stop()
    again = manager(tmp_path)
    assert states(again) == {1: LeaseState.NEW}           # what the disk holds, replayed without complaint
    again.stop()


def test_a_dying_scheduling_thread_takes_the_daemon_down(tmp_path):
    m = manager(tmp_path)

    def dead(next_event, wake=None):
        raise OverflowError("cannot convert float infinity to integer")
    m.clock.advance = dead
    m.start()
    m._thread.join(timeout=10)
    assert m.stopping.is_set() and m.fatal_rc == 1
    assert m.fatal == "the scheduling thread stopped: OverflowError: cannot convert float infinity to integer"
    m.stop()


IMMEDIATE = ('<lease><nodes><node-set numnodes="{n}"><res type="CPU" amount="100"/><res type="Memory" amount="512"/>'
             '</node-set></nodes><start><now/></start><duration time="00:{m:02d}:00"/></lease>')
OPS = st.lists(st.one_of(
    st.tuples(st.just("be"), st.integers(1, 4), st.integers(1, 40)),
    st.tuples(st.just("ar"), st.integers(1, 4), st.integers(1, 40), st.integers(1, 59)),
    st.tuples(st.just("now"), st.integers(1, 4), st.integers(1, 40)),
    st.tuples(st.just("cancel"), st.integers(1, 30)),
    st.tuples(st.just("step"), st.integers(0, 1800))), min_size=1, max_size=30)


FINISHED = (LeaseState.DONE, LeaseState.CANCELLED, LeaseState.REJECTED, LeaseState.FAILED)


def apply_ops(m, ops, checkpoints: bool = False) -> None:
    """Play `ops` (drawn from OPS, plus ("checkpoint",)) on the manager: requests, cancellations of leases not yet
    finished, steps of the clock; a checkpoint is written only when `checkpoints`, so two managers fed the same ops
    differ in that alone."""
    t = m.last_t
    for op in ops:
        if op[0] == "step":
            t += op[1]
            run_until(m, t)
        elif op[0] == "checkpoint":
            if checkpoints:
                m.write_checkpoint()
        elif op[0] == "cancel":
            if op[1] in m.all and m.all[op[1]].state not in FINISHED:
                m.cancel(op[1])
        else:
            xml = {"be": BE, "now": IMMEDIATE}.get(op[0], AR)
            submit(m, xml.format(n=op[1], m=op[2], s=op[3] if op[0] == "ar" else 0))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_any_journal_the_daemon_writes_replays_to_the_same_state(tmp_path_factory, ops):
    """Whatever requests, cancellations and steps came, a restart rebuilds every lease and reservation as they were,
    and the replay itself never fails."""
    tmp_path = tmp_path_factory.mktemp("journal")
    m = manager(tmp_path)
    apply_ops(m, ops)
    before = (states(m), plan_of(m), {i: lease.accumulated for i, lease in m.all.items()})
    m.stop()
    again = manager(tmp_path)
    assert (states(again), plan_of(again), {i: lease.accumulated for i, lease in again.all.items()}) == before
    assert not [n for n in again.notes if "recorded as" in n], again.notes
    again.stop()
