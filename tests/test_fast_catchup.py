"""mode fast, the daemon down while its plan had things to do: the hosts did nothing meanwhile, so catch-up must not
pretend they did. A real mosquitto, four `optlease agent` processes on test:///, `optlease serve --fg` killed with
SIGKILL while an advance reservation runs and started again after three best-effort instants it missed: lease 1's
resume, lease 3's whole run, lease 4's start, the last of the three with its end still ahead. Each of them runs on a host after the restart
for all its time, as the agents report it, and the log says how late."""
from __future__ import annotations

import os
import signal
import sqlite3
import time
from datetime import datetime

from conftest import wait_until
from mqtt_broker import mosquitto  # noqa: F401 - the fixture
from test_fast_e2e import AR, BE, QUICKSTART_SCHEDULING, Cluster, daemon_under_test_config, first, submit

TOL = 120       # simulated seconds (0.4 s real) between a planned instant and what the watcher sees


def sim_time(c: Cluster, text: str) -> int:
    """A lease XML time (`2026-11-24 12:00:14.00`) as the daemon's simulated instant."""
    return int((datetime.strptime(text[:19], "%Y-%m-%d %H:%M:%S") - datetime.fromtimestamp(c.epoch()))
               .total_seconds())


def ran(c: Cluster, vm: str, after: float) -> float:
    """How many simulated seconds the agents reported `vm` running after the real time `after`."""
    hist = c.watcher.history(vm)
    total, since = 0.0, None
    for t, _h, state in hist:
        if state == "running" and since is None and t >= after:
            since = t
        elif state != "running" and since is not None:
            total, since = total + (t - since), None
    return total * c.scale


class Conservative(Cluster):
    """The quickstart's site with conservative backfilling: every queued lease is booked, so the plan has every
    lease's instants before the daemon goes down."""

    def daemon_config(self, hosts, task_timeout: float) -> str:
        return daemon_under_test_config(self.port, self.broker.port, hosts,
                                        resources=f"{len(hosts)} CPU:100 Memory:1024", scale=self.scale,
                                        scheduling={**QUICKSTART_SCHEDULING, "backfilling": "conservative"},
                                        mqtt={"task-timeout": task_timeout})


def test_best_effort_instants_missed_in_mode_fast_run_after_the_restart(tmp_path, mosquitto):  # noqa: F811
    c = Conservative(tmp_path, mosquitto)
    try:
        c.start_daemon()
        assert submit(c, BE.format(n=1, d="00:15:00")) == 1
        start = int(c.sim(time.time())) + 600
        assert submit(c, AR.format(n=4, t=f"{start // 3600:02d}:{start % 3600 // 60:02d}:{start % 60:02d}",
                                   d="00:05:00")) == 2           # suspends lease 1 for five minutes
        assert submit(c, BE.format(n=4, d="00:05:00")) == 3      # after lease 1 resumes and ends
        assert submit(c, BE.format(n=4, d="00:10:00")) == 4      # after lease 3
        ar_vms = [f"lease-2-vm-{i}" for i in range(1, 5)]
        wait_until(lambda: all(c.watcher.where(v) for v in ar_vms), 20, "the AR's VMs")
        plan = c.leases()
        assert plan[1]["state"] == "Suspended-Scheduled" and plan[2]["state"] == "Active", plan
        ar_end = sim_time(c, plan[2]["planned-end"])
        start3, end3 = sim_time(c, plan[3]["start-time"]), sim_time(c, plan[3]["planned-end"])
        start4, end4 = sim_time(c, plan[4]["start-time"]), sim_time(c, plan[4]["planned-end"])
        assert ar_end <= start3 < end3 <= start4 < end4, plan
        # lease 1's resume is booked at the AR's end, or after lease 4 when its suspension was enacted late on a
        # loaded machine (conservative backfilling then keeps leases 3 and 4 where they were booked)
        end1 = sim_time(c, plan[1]["planned-end"])
        last_start, last_end = max((end1 - 300, end1), (start4, end4))
        os.kill(c.daemon.pid, signal.SIGKILL)
        c.daemon.wait(5)
        # down past lease 1's resume, lease 3's whole run and lease 4's start, and half way through the last of
        # these runs
        c.sleep_until((last_start + last_end) // 2)
        restarted = time.time()
        c.start_daemon()
        leases = c.leases()
        # the AR's window is over (it ran: its VMs kept running); nothing of the others ran, so nothing is Done
        assert leases[2]["state"] == "Done", leases
        assert leases[3]["state"] != "Done" and leases[4]["state"] != "Done", leases
        log = c.log()
        for lease, what in ((1, "resumed"), (3, "started"), (4, "started")):
            assert f"lease {lease} was to be {what}" in log, log[-3000:]
        assert "while the lease manager was down and the hosts did nothing" in log
        # each runs on the hosts after the restart, for all its time
        wait_until(lambda: all(a["state"] == "Done" for a in c.leases().values()), 40, "every lease done")
        wait_until(lambda: not any(c.watcher.where(f"lease-{i}-vm-{v}") for i in (1, 3, 4) for v in (1, 2, 3, 4)),
                   10, "every domain stopped")
        # the daemon booked and counted each its whole time, to the second
        with sqlite3.connect(c.tmp / "state.db") as db:
            run = dict(db.execute("SELECT id, accumulated FROM leases WHERE id IN (1, 3, 4)").fetchall())
        assert run == {1: 900, 3: 300, 4: 600}, run
        # and the hosts ran it after the restart: what the agents report lags the plan by the enactment's latency
        # at each end (the restart's reconciliation before the first start), which a loaded machine stretches to
        # tenths of a real second, each 300 simulated seconds here
        vm1 = "lease-1-vm-1"
        assert first(c.watcher.history(vm1), "running", after=restarted) is not None, c.watcher.history(vm1)
        assert ran(c, vm1, restarted) >= 300 - 2 * TOL                 # the 5 minutes it had left
        for lease, duration in ((3, 300), (4, 600)):
            for v in range(1, 5):
                assert ran(c, f"lease-{lease}-vm-{v}", restarted) >= duration - 2 * TOL, (lease, v)
        # the journal written by all this replays to the same states
        c.daemon.send_signal(signal.SIGKILL)
        c.daemon.wait(5)
        c.start_daemon()
        assert "recorded as" not in c.log() and "Traceback" not in c.log()
        assert all(a["state"] == "Done" for a in c.leases().values())
    finally:
        c.close()
