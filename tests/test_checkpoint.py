"""Checkpoints: a restart from a checkpoint and the journal after it is the restart from the whole journal, and the
runs that follow decide the same; the entries a checkpoint covers are gone; a checkpoint this build did not write,
or one holding anything but scheduler records, is refused in one line."""
from __future__ import annotations

import pickle
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optlease.engine.daemon import Manager
from optlease.engine.persist import StoreError
from optlease.formats.config import parse_config
from test_persist import BE, CONF, CPSAT, apply_ops, plan_of, run_until, states, submit


def manager(folder, conf=CONF):
    folder.mkdir(exist_ok=True)
    m = Manager(parse_config(conf.format(db="state.db"), str(folder / "d.conf"), folder))
    m.clock.now = lambda: 0     # arrivals at the last step: both runs see the same instants
    return m


def picture(m):
    """Everything a client or the next step can see of the state."""
    return (states(m), plan_of(m), {i: (lease.accumulated, lease.first_start, lease.end, lease.reason)
                                    for i, lease in m.all.items()},
            [lease.id for lease in m.sched.queue], [lease.id for lease in m.inbox], m.last_t,
            m.stepper.next_event(m.last_t), m.stepper.rounds)


OPS = st.lists(st.one_of(
    st.tuples(st.just("be"), st.integers(1, 4), st.integers(1, 40)),
    st.tuples(st.just("ar"), st.integers(1, 4), st.integers(1, 40), st.integers(1, 59)),
    st.tuples(st.just("now"), st.integers(1, 4), st.integers(1, 40)),
    st.tuples(st.just("cancel"), st.integers(1, 30)),
    st.tuples(st.just("step"), st.integers(0, 1800)),
    st.just(("checkpoint",))), min_size=1, max_size=30)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, more=OPS)
def test_a_restart_after_checkpoints_is_the_restart_without_them(tmp_path_factory, ops, more):
    """The same requests, cancellations and steps, with checkpoints at random moments and without any: after a
    restart both hold the same leases, reservations, queue and next event, and the runs that go on from there
    (more requests and steps, another checkpoint, another restart) decide the same."""
    tmp = tmp_path_factory.mktemp("cp")
    a, b = manager(tmp / "a"), manager(tmp / "b")
    apply_ops(a, ops, checkpoints=True)
    apply_ops(b, ops, checkpoints=False)
    assert picture(a) == picture(b)
    a.stop(), b.stop()
    a, b = manager(tmp / "a"), manager(tmp / "b")
    assert picture(a) == picture(b)
    assert not [n for n in a.notes if "recorded as" in n], a.notes
    apply_ops(a, more + [("checkpoint",), ("step", 600)], checkpoints=True)
    apply_ops(b, more + [("checkpoint",), ("step", 600)], checkpoints=False)
    assert picture(a) == picture(b)
    a.stop(), b.stop()
    a, b = manager(tmp / "a"), manager(tmp / "b")
    assert picture(a) == picture(b)
    a.stop(), b.stop()


def test_a_checkpoint_drops_the_entries_it_covers_and_cpsat_replays_after_it(tmp_path):
    """With `mapper: cpsat` (rounds that keep their own bookkeeping and journal their decisions), a checkpoint in the
    middle of a run leaves only the later entries, and the restart rebuilds the plan that was enacted."""
    m = manager(tmp_path, CPSAT)
    for n, mins in [(4, 30), (3, 50), (1, 5), (2, 10)]:
        submit(m, BE.format(n=n, m=mins))
    run_until(m, 600)
    m.write_checkpoint(wait=True)
    db = sqlite3.connect(tmp_path / "state.db")
    assert db.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0
    assert db.execute("SELECT COUNT(*) FROM decisions").fetchone()[0] == 0
    for n, mins in [(1, 40), (4, 3), (2, 7)]:
        submit(m, BE.format(n=n, m=mins))
    run_until(m, 1500)
    before = picture(m)
    kinds = [k for (k,) in db.execute("SELECT kind FROM events ORDER BY seq")]
    assert kinds[:3] == ["request"] * 3 and "step" in kinds
    m.stop()
    again = manager(tmp_path, CPSAT)
    assert picture(again) == before
    assert again.decisions.diverged == 0 and any(n.startswith("checkpoint at journal entry") for n in again.notes)
    again.stop()


def forge(tmp_path, build=None, body=None):
    m = manager(tmp_path)
    submit(m, BE.format(n=1, m=5))
    m.step(0)
    m.write_checkpoint(wait=True)
    m.stop()
    db = sqlite3.connect(tmp_path / "state.db")
    if build is not None:
        db.execute("UPDATE checkpoints SET build=?", (build,))
    if body is not None:
        db.execute("UPDATE checkpoints SET body=?", (body,))
    db.commit()


class Evil:
    def __reduce__(self):
        import os
        return (os.system, ("true",))


@pytest.mark.parametrize("build, body, message", [
    ("0123456789abcdef", None, "written by another optlease build"),
    (None, pickle.dumps(Evil()), "holds posix.system, which no checkpoint holds"),
    (None, b"not a pickle", "does not load"),
])
def test_a_checkpoint_this_build_did_not_write_is_one_line(tmp_path, build, body, message):
    forge(tmp_path, build, body)
    with pytest.raises(StoreError, match=message) as exc:
        manager(tmp_path)
    assert "\n" not in str(exc.value)
