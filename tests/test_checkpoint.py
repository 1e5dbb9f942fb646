"""Checkpoints: a restart from a checkpoint and the journal after it is the restart from the whole journal, and the
runs that follow decide the same; the entries a checkpoint covers are gone; a checkpoint this build did not write,
or one holding anything but scheduler records, is refused in one line. Checkpoints are written by a forked child
(engine.checkpoint_fork), real processes and SQLite files: one committed after the journal went on covers what its
image holds and no more; a child that dies, or a file cut short or corrupt, leaves the journal as it was."""
from __future__ import annotations

import io
import os
import pickle
import random
import signal
import sqlite3
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optlease.engine import checkpoint, checkpoint_fork
from optlease.engine.daemon import Manager
from optlease.engine.persist import Store, StoreError
from optlease.formats.config import parse_config
from test_persist import BE, CONF, CPSAT, apply_ops, plan_of, run_until, states, submit


def manager(folder, conf=CONF):
    folder.mkdir(parents=True, exist_ok=True)
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
    assert a.collect_checkpoint(wait=True)      # the last child forked, committed (the others at later steps)
    assert picture(a) == picture(b)
    a.stop(), b.stop()
    a, b = manager(tmp / "a"), manager(tmp / "b")
    asked = [i for i, op in enumerate(ops) if op[0] in ("be", "ar", "now")]
    if asked and ("checkpoint",) in ops[asked[0] + 1:]:     # one after a journal entry: a child wrote it
        assert any(n.startswith("checkpoint at journal entry") for n in a.notes), a.notes
    assert picture(a) == picture(b)
    assert not [n for n in a.notes if "recorded as" in n], a.notes
    apply_ops(a, more + [("checkpoint",), ("step", 600)], checkpoints=True)
    apply_ops(b, more + [("checkpoint",), ("step", 600)], checkpoints=False)
    assert a.collect_checkpoint(wait=True)
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


def checkpointed(tmp_path) -> sqlite3.Connection:
    """The persistence file of a daemon that took one lease, stepped, wrote a checkpoint and stopped."""
    m = manager(tmp_path)
    submit(m, BE.format(n=1, m=5))
    m.step(m.now())   # (its arrival: the daemon's clock may have moved on since it was made)
    m.write_checkpoint(wait=True)
    m.stop()
    return sqlite3.connect(tmp_path / "state.db")


def forge(tmp_path, build=None, body=None):
    db = checkpointed(tmp_path)
    if build is not None:
        db.execute("UPDATE checkpoints SET build=?", (build,))
    if body is not None:
        db.execute("UPDATE checkpoints SET body=?", (body,))
    db.commit()


class Evil:
    def __reduce__(self):
        import os
        return (os.system, ("true",))


def random_ops(rng: random.Random, n: int) -> list[tuple]:
    """Requests of every kind, cancellations and steps (OPS's alphabet), ending with a request and a step."""
    ops = []
    for _ in range(n):
        what = rng.choice(("be", "be", "ar", "now", "cancel", "step", "step"))
        if what == "cancel":
            ops.append(("cancel", rng.randint(1, 30)))
        elif what == "step":
            ops.append(("step", rng.randint(0, 1800)))
        else:
            ops.append((what, rng.randint(1, 4), rng.randint(1, 40)) + ((rng.randint(1, 59),) if what == "ar" else ()))
    return ops + [("be", 2, 20), ("step", 60)]


def later_commit(tmp, seed: int, broken: bool = False, monkeypatch=None):
    """A checkpoint forked after `first` ops and committed only after `then` ops more, against a daemon without
    checkpoints: (the pictures after a restart of each, or None when the one with the checkpoint refuses to start,
    the checkpoint's journal position and the last entry). `broken`: the commit claims the whole journal so far
    instead of what the child's image holds."""
    rng = random.Random(seed)
    first, then = random_ops(rng, 12), random_ops(rng, 8)
    a, b = manager(tmp / "a"), manager(tmp / "b")
    if broken:
        monkeypatch.setattr(a.store, "add_checkpoint",
                            lambda seq, *rest, **kw: Store.add_checkpoint(a.store, a.store.last_seq(), *rest, **kw))
    apply_ops(a, first)
    apply_ops(b, first)
    with a._collecting:         # the daemon commits the child's file only after the journal went on
        a.write_checkpoint()
        apply_ops(a, then)
    apply_ops(b, then)
    assert a.collect_checkpoint(wait=True)
    assert picture(a) == picture(b)
    db = sqlite3.connect(tmp / "a" / "state.db")
    covered, last = db.execute("SELECT seq FROM checkpoints").fetchone()[0], db.execute(
        "SELECT MAX(seq) FROM events").fetchone()[0]
    # the parts of the checkpoints before it are gone
    assert broken or db.execute("SELECT DISTINCT seq FROM checkpoint_parts").fetchall() == [(covered,)]
    a.stop(), b.stop()
    try:
        again = restarted(tmp / "a")
    except StoreError:
        again = None
    return again, restarted(tmp / "b"), covered, last


def restarted(folder):
    """What a restart of the daemon in `folder` pictures."""
    m = manager(folder)
    try:
        return picture(m)
    finally:
        m.stop()


@pytest.mark.parametrize("seed", range(4))
def test_a_checkpoint_committed_after_the_journal_went_on_covers_what_its_image_holds(tmp_path, seed):
    """The child's image is the state after the journal entry at which it was forked; the entries journaled while
    it wrote stay, and a restart replays them after it: the state of the daemon that never checkpointed."""
    again, reference, covered, last = later_commit(tmp_path, seed)
    assert covered < last
    assert again == reference


def test_a_commit_that_claims_the_entries_journaled_after_the_fork_is_caught(tmp_path, monkeypatch):
    """The comparison can fail: a checkpoint committed as covering the whole journal at its commit (entries its
    image does not hold dropped) restarts to another state, or not at all."""
    outcomes = [later_commit(tmp_path / str(seed), seed, broken=True, monkeypatch=monkeypatch)
                for seed in range(4)]
    assert all(again != reference for again, reference, _, _ in outcomes)


def dies(real):
    def dump_to(manager, out):
        out.write(b"half a checkpoint")
        os.kill(os.getpid(), signal.SIGKILL)
    return dump_to


def cut_short(real):
    def dump_to(manager, out):
        real(manager, out)
        out.out.flush()
        out.out.seek(out.size // 2)
        out.out.truncate()
    return dump_to


def corrupt(real):
    def dump_to(manager, out):
        real(manager, out)
        out.out.flush()
        fd, at = out.out.fileno(), out.size // 2
        os.pwrite(fd, bytes([os.pread(fd, 1, at)[0] ^ 0xFF]), at)
    return dump_to


def hangs(real):
    def dump_to(manager, out):
        out.write(b"a third of a checkpoint")
        time.sleep(3600)        # as a child stuck on a lock another thread held at the fork would
    return dump_to


@pytest.mark.parametrize("breaks, said", [(dies, "killed by signal 9"), (cut_short, "truncated"),
                                          (corrupt, "corrupt"), (hangs, "was still at it after 1 s and was killed")],
                         ids=["child dies", "cut short", "corrupt", "child hangs"])
def test_a_checkpoint_that_fails_leaves_the_journal_and_the_daemon_restarts_from_it(tmp_path, monkeypatch, breaks,
                                                                                     said):
    """A child killed while it writes, one that hangs past its deadline, or a file that is not what it wrote (cut
    short, a byte flipped): one line in the log, no checkpoint, every journal entry kept; the daemon goes on,
    writes the next checkpoint, and restarts to the state of a daemon that never checkpointed."""
    rng = random.Random(7)
    first, then = random_ops(rng, 15), random_ops(rng, 6)
    a, b = manager(tmp_path / "a"), manager(tmp_path / "b")
    log = io.StringIO()
    a._set_log(log)
    apply_ops(a, first)
    apply_ops(b, first)
    entries = a.store.entries
    monkeypatch.setattr(checkpoint, "dump_to", breaks(checkpoint.dump_to))
    monkeypatch.setattr(checkpoint_fork, "CHILD_DEADLINE_S", 1.0)
    a.write_checkpoint(wait=True)
    monkeypatch.undo()
    line = [line for line in log.getvalue().splitlines() if "abandoned" in line]
    assert len(line) == 1 and said in line[0] and "the journal stays as it was" in line[0], log.getvalue()[-500:]
    db = sqlite3.connect(tmp_path / "a" / "state.db")
    assert db.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0] == 0
    assert db.execute("SELECT COUNT(*) FROM events").fetchone()[0] == entries == a.store.entries
    a.stop(), b.stop()
    a, b = manager(tmp_path / "a"), manager(tmp_path / "b")
    assert picture(a) == picture(b)
    apply_ops(a, then + [("checkpoint",), ("step", 60)], checkpoints=True)
    apply_ops(b, then + [("checkpoint",), ("step", 60)])
    assert a.collect_checkpoint(wait=True)
    assert db.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0] == 1
    a.stop(), b.stop()
    assert restarted(tmp_path / "a") == restarted(tmp_path / "b")


def sealed(body: bytes) -> bytes:
    return body + checkpoint_fork.TRAILER.pack(len(body), checkpoint_fork.hashlib.blake2b(body, digest_size=32).digest())


def forge_parts(tmp_path, change):
    """A checkpoint written by a child, then its parts changed on disk by `change(parts) -> parts`."""
    db = checkpointed(tmp_path)
    seq = db.execute("SELECT seq FROM checkpoints").fetchone()[0]
    assert db.execute("SELECT body FROM checkpoints").fetchone()[0] == b""
    data = b"".join(p for (p,) in db.execute("SELECT body FROM checkpoint_parts ORDER BY n"))
    db.execute("DELETE FROM checkpoint_parts")
    for n, part in enumerate(change(data)):
        db.execute("INSERT INTO checkpoint_parts VALUES (?, ?, ?)", (seq, n, part))
    db.commit()


@pytest.mark.parametrize("change, message", [
    (lambda data: [data], None),
    (lambda data: [data[:len(data) // 2]], "is truncated"),
    (lambda data: [data[:100] + bytes([data[100] ^ 1]) + data[101:]], "is corrupt"),
    (lambda data: [], "is truncated"),
    (lambda data: [sealed(pickle.dumps(Evil()))], "holds posix.system, which no checkpoint holds"),
    (lambda data: [sealed(b"not a pickle")], "does not load"),
], ids=["as written", "cut short", "a byte flipped", "no parts", "a sealed forgery", "not a pickle"])
def test_a_checkpoint_in_parts_that_is_not_what_the_child_wrote_is_one_line(tmp_path, change, message):
    """A checkpoint is untrusted data: its seal (size and digest) is checked before it is unpickled, and a forgery
    sealed right is still only unpickled into scheduler records (`_Loader.find_class`)."""
    forge_parts(tmp_path, change)
    if message is None:
        manager(tmp_path).stop()
        return
    with pytest.raises(StoreError, match=message) as exc:
        manager(tmp_path)
    assert "\n" not in str(exc.value)


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


def test_the_live_daemon_writes_checkpoints_while_it_serves_and_restarts_from_them(tmp_path, monkeypatch):
    """The loop and enactment threads running, requests from client threads: checkpoints are due every 15 journal
    entries, written by children and committed by the enactment thread while requests go on; a restart after them
    holds every lease as it was, and replays only the entries after the last one."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(checkpoint, "CHECKPOINT_EVERY", 15)
    folder = tmp_path / "live"
    folder.mkdir()
    m = Manager(parse_config(CONF.format(db="state.db"), str(folder / "d.conf"), folder))
    log = io.StringIO()
    m._set_log(log)
    m.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            ids = list(pool.map(lambda k: submit(m, BE.format(n=1 + k % 4, m=30 + k % 20)), range(60)))
        db = sqlite3.connect(folder / "state.db")
        for _ in range(600):        # until the last child's checkpoint is committed (polled, not timed)
            with m.lock:
                settled = m._child is None
            if settled and db.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0]:
                break
            m.enact_wake.wait(0.05)
    finally:
        m.stop()
    before = picture(m)         # as the threads left it (each of their changes committed)
    committed = [line for line in log.getvalue().splitlines() if "written by a child" in line]
    assert committed and "abandoned" not in log.getvalue(), log.getvalue()[-800:]
    assert sorted(ids) == list(range(1, 61))
    again = manager(folder)
    try:
        assert picture(again) == before
        assert not [n for n in again.notes if "recorded as" in n], again.notes
        assert any(n.startswith("checkpoint at journal entry") for n in again.notes)
    finally:
        again.stop()


def test_a_child_writes_while_the_daemon_keeps_its_objects_frozen_and_its_file_is_committed_part_by_part(
        tmp_path, monkeypatch):
    """While a child writes, the daemon's objects are out of the collector's sight (a full collection would copy
    every page the child shares); once the checkpoint is committed they are back. The commit reads the child's
    file a part at a time (never the whole of it in the daemon's memory), and a restart from those parts is the
    restart without a checkpoint."""
    import gc

    from optlease.engine import persist

    monkeypatch.setattr(persist, "PART", 1024)
    rng = random.Random(5)
    ops = random_ops(rng, 20)
    a, b = manager(tmp_path / "a"), manager(tmp_path / "b")
    apply_ops(a, ops)
    apply_ops(b, ops)
    staged, real = [], a.store.stage_checkpoint

    def stage(seq, parts):
        assert not isinstance(parts, (bytes, bytearray, memoryview))
        return real(seq, (staged.append(len(part)) or part for part in parts))
    monkeypatch.setattr(a.store, "stage_checkpoint", stage)
    frozen = gc.get_freeze_count()
    with a._collecting:
        a.write_checkpoint()
        assert gc.get_freeze_count() > frozen
    assert a.collect_checkpoint(wait=True)
    assert gc.get_freeze_count() == 0
    assert len(staged) > 2 and max(staged) <= 1024
    a.stop(), b.stop()
    assert restarted(tmp_path / "a") == restarted(tmp_path / "b")
