"""The durability loop: `optlease serve` killed with SIGKILL 20 times at random moments while a client sends a mixed
stream of requests (ARs, best-effort and immediate leases, cancellations). Every restart is clean, every lease a
client was given an id for is there exactly once, every acknowledged cancellation holds, and no lease is in a state
its times contradict."""
from __future__ import annotations

import random
import threading
import time
import xmlrpc.client
from datetime import datetime, timedelta

from optlease.formats.lease_states import label_of_code
from test_daemon_recovery import SCALE, Daemon, client

KILLS = 20
ROUNDING = 1             # the daemon steps at whole simulated seconds
TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


class Client(threading.Thread):
    """Sends requests and cancellations until told to stop; remembers what was acknowledged."""

    def __init__(self, d: Daemon, seed: int) -> None:
        super().__init__(daemon=True)
        self.d, self.rng = d, random.Random(seed)
        self.acked: set[int] = set()
        self.cancelled: set[int] = set()
        self.done = threading.Event()

    def run(self) -> None:
        from optlease.cli.lease_cmds import lease_xml

        rng = self.rng
        proxy = client(self.d.port)
        while not self.done.is_set():
            kind = rng.choice(["ar", "be", "be", "now", "cancel"])
            try:
                if kind == "cancel" and self.acked:
                    lease = max(self.acked)   # the latest: likely still there to cancel
                    proxy.cancel_lease(lease)
                    self.cancelled.add(lease)
                elif kind != "cancel":
                    start = {"ar": f"+00:00:00:{rng.randint(5, 59):02d}", "be": "best_effort", "now": "now"}[kind]
                    # about half the site's capacity on average: the queue stays short
                    length = f"00:00:{rng.randint(2, 15):02d}"
                    nodes = rng.randint(2, 4) if kind == "now" else rng.randint(1, 2)   # some immediate ones fail
                    xml = lease_xml(start, length, nodes, kind == "be" and rng.random() < 0.5, 100, 64, None, None)
                    self.acked.add(proxy.create_lease(xml))
            except (OSError, xmlrpc.client.Fault, xmlrpc.client.ProtocolError):
                pass      # refused, or the daemon is down: not acknowledged
            time.sleep(rng.uniform(0.05, 0.3))


def contradictions(d: Daemon) -> list[str]:
    """Leases whose state their own times contradict. What was due before the daemon was launched must have
    happened (it catches up before it answers); nothing may have happened after now."""
    import sqlite3

    with sqlite3.connect(d.db) as db:
        epoch = int(db.execute("SELECT value FROM meta WHERE key='epoch'").fetchone()[0])
    origin = datetime.fromtimestamp(epoch)
    leases = d.leases()
    now = (time.time() - epoch) * SCALE + ROUNDING
    due = (d.launched - epoch) * SCALE - ROUNDING

    def sim(text):
        return None if text is None else (datetime.strptime(text, TIME_FORMAT) - origin) / timedelta(seconds=1)
    bad = []
    for i, e in leases.items():
        state, start, end = label_of_code(e.get("state")), sim(e.get("start-time")), sim(e.get("end-time"))
        planned_end = sim(e.get("planned-end"))
        if state == "Scheduled" and start is not None and start < due:
            bad.append(f"lease {i} Scheduled with its start {start:.0f} past (launched at {due:.0f})")
        if state == "Active" and (start is None or start > now or (planned_end is not None and planned_end < due)):
            bad.append(f"lease {i} Active from {start} to {planned_end} (launched at {due:.0f}, now {now:.0f})")
        if state in ("Done", "Cancelled", "Failed", "Rejected") and (end is None or end > now):
            bad.append(f"lease {i} {state} with end {end} (now {now:.0f})")
        if state == "Done" and (start is None or end < start):
            bad.append(f"lease {i} Done from {start} to {end}")
    return bad


def test_twenty_kill9_under_a_mixed_request_stream_lose_nothing(tmp_path):
    d = Daemon(tmp_path, nodes=4).start()
    rng = random.Random(23)
    client = Client(d, seed=5)
    client.start()
    try:
        for kill in range(KILLS):
            time.sleep(rng.uniform(0.1, 0.6))
            d.kill9()
            d.start()
            acked, cancelled = set(client.acked), set(client.cancelled)   # before the daemon is asked
            ids = [int(x.split('id="', 1)[1].split('"', 1)[0]) for x in d.proxy.get_leases(True)]
            assert len(ids) == len(set(ids)), f"restart {kill}: a lease is listed twice"
            states = d.states()
            assert acked <= set(states), f"restart {kill}: acknowledged leases lost: {sorted(acked - set(states))}"
            assert all(states[i] == "Cancelled" for i in cancelled), \
                f"restart {kill}: " + str({i: states[i] for i in cancelled if states[i] != "Cancelled"})
            assert contradictions(d) == [], f"restart {kill}"
            log = d.log()
            assert "Traceback" not in log and "recorded as" not in log and "stopping:" not in log, log[-2000:]
        # on a loaded machine the daemon spends most of the loop restarting: let the stream go on (bounded) until it
        # has been mixed enough for the checks below to mean something
        deadline = time.monotonic() + 60
        while (len(client.acked) < 20 or len(client.cancelled) < 2) and time.monotonic() < deadline:
            time.sleep(0.2)
        seen = {(e.get("type"), label_of_code(e.get("state"))) for e in d.leases().values()}
    finally:
        client.done.set()
        client.join(timeout=10)
        d.close()
    # the stream was mixed: every kind of lease came, and leases ran and were cancelled
    assert {kind for kind, _ in seen} == {"AR", "Best-effort", "Immediate"}, seen
    assert {"Done", "Cancelled"} <= {state for _, state in seen}, seen
    assert len(client.acked) >= 20 and len(client.cancelled) >= 2, (len(client.acked), len(client.cancelled))
