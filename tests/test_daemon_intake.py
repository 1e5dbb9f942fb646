"""Requests come in without the manager's lock: while steps run, clients keep submitting (at the very instant
being stepped), and a restart (which replays each request where the journal has it) rebuilds exactly the state the
daemon had, with every request stepped at the same instant as live."""
from __future__ import annotations

import threading
import time

from test_checkpoint import manager, picture
from test_persist import AR, BE, run_until, submit


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
