"""Requests come in without the manager's lock: while steps run, clients keep submitting (at the very instant
being stepped), and a restart (which replays each request where the journal has it) rebuilds exactly the state the
daemon had, with every request stepped at the same instant as live."""
from __future__ import annotations

import threading
import time

from optlease.domain.lease import LeaseState
from test_checkpoint import manager, picture
from test_persist import AR, BE, CONF, run_until, submit


def test_requests_committed_while_steps_run_replay_to_the_same_state(tmp_path):
    m = manager(tmp_path)
    t = {"now": 0}
    m.clock.now = lambda: t["now"]
    rounds = m.stepper.step

    def slow_round(now, arrivals=()):
        time.sleep(0.003)           # a round that takes a while: requests are committed while it runs
        rounds(now, arrivals)

    m.stepper.step = slow_round
    stop = threading.Event()
    ids: list[int] = []

    def client(k: int) -> None:
        n = 0
        while not stop.is_set() and n < 60:
            xml = AR.format(n=1, s=1 + n % 5, m=2) if (k + n) % 3 == 0 else BE.format(n=1 + n % 2, m=1 + n % 7)
            ids.append(submit(m, xml))
            n += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        run_until(m, t["now"])      # requests arrive at the very instant being stepped
        t["now"] += 7
    for thread in threads:
        thread.join()
    t["now"] += 7
    run_until(m, t["now"])
    before = picture(m)
    assert len(ids) == len(set(ids)) == 240 and set(ids) == set(m.all)
    # each request was stepped at an instant at or after its arrival, never one before
    assert all(lease.req.arrival <= t["now"] for lease in m.all.values())
    m.stop()
    again = manager(tmp_path)
    assert picture(again) == before
    assert not [n for n in again.notes if "recorded as" in n], again.notes
    again.stop()


def test_a_client_is_answered_once_its_request_and_the_step_that_took_it_are_on_disk(tmp_path):
    """With the loop running, a request and the step that takes it are one transaction (one fsync): when
    create_lease returns, the lease has been stepped (never `New`), whether the client's own thread stepped it or
    handed its batch to the loop (a slow round holds the scheduler), and a restart rebuilds that state."""
    m = manager(tmp_path)
    rounds = m.stepper.step

    def slow_round(now, arrivals=()):
        time.sleep(0.002)           # clients queue up behind it: batches are handed to the loop too
        rounds(now, arrivals)

    m.stepper.step = slow_round
    m.start()
    seen: dict[int, object] = {}

    def client(k: int) -> None:
        for n in range(25):
            xml = AR.format(n=1, s=1 + n % 5, m=2) if (k + n) % 3 == 0 else BE.format(n=1 + n % 2, m=1 + n % 7)
            lease_id = submit(m, xml)
            seen[lease_id] = m.views.get(lease_id).state

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    m.stop()
    assert sorted(seen) == list(range(1, 101))
    assert LeaseState.NEW not in seen.values(), seen
    journal = m.store.__class__(m.store.path).load()
    kinds = [kind for _, kind, _ in journal.events]
    assert kinds.count("request") == 100 and kinds[-1] == "step"
    before = picture(m)
    again = manager(tmp_path)
    assert picture(again) == before
    assert not [n for n in again.notes if "recorded as" in n], again.notes
    again.stop()



def test_an_instant_planned_by_a_request_while_the_loop_slept_is_stepped_not_skipped(tmp_path):
    """A request is stepped on its client's thread while the loop sleeps (until its wakeup interval), and plans an
    instant before that (an AR's start); the clock passes that instant before the loop is woken (a round that takes
    a while, a loaded machine). The loop steps the AR's own instant: a step after it would never start the AR (a
    step starts what starts at its own instant), and the AR would stay scheduled through its window."""
    m = manager(tmp_path, CONF.replace("[scheduling]", "[scheduling]\nwakeup-interval: 3600"))
    t = {"now": 0}
    m.clock.now = lambda: t["now"]
    rounds = m.stepper.step
    stepped_by: list[str] = []

    def round_then_the_clock_moves_on(now, arrivals=()):
        rounds(now, arrivals)
        stepped_by.append(threading.current_thread().name)
        if any(lease.id == 1 for lease in arrivals):
            t["now"] = m.stepper.next_event(now) + 1     # past the instant this round planned

    m.stepper.step = round_then_the_clock_moves_on
    # the loop alone (no enactment thread, which would hold the lock now and then): a request is stepped on its
    # client's thread while the loop sleeps
    m._fold_steps = True
    m._thread = threading.Thread(target=m.run, name="optlease-loop", daemon=True)
    m._thread.start()
    try:
        deadline = time.monotonic() + 10
        while m._sleeping_to == 0 and time.monotonic() < deadline:
            time.sleep(0.01)          # the loop sleeps until its wakeup interval: nothing is planned
        t["now"] = 20
        assert submit(m, AR.format(n=1, s=1, m=10)) == 1
        assert stepped_by == ["MainThread"]
        ar_start = t["now"] - 1
        deadline = time.monotonic() + 10
        while m.last_t < ar_start and time.monotonic() < deadline:
            time.sleep(0.01)
        assert m.last_t == ar_start, (m.last_t, ar_start)
        assert m.all[1].state == LeaseState.ACTIVE
    finally:
        m.stop()
