"""The live lease manager: the simulator's step on a real clock, requests from the API, every change on disk.

A `Manager` owns one LeaseScheduler. All access to it goes through `manager.lock`. Its loop thread sleeps on the
real clock until the next planned event, a new request or the wakeup interval, then runs the step the simulator
runs, commits what changed, and hands enactment the tasks that bring the hosts to the new plan.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import TextIO

from optlease.domain.lease import LeaseRequest, LeaseState
from optlease.domain.site import Site
from optlease.enact.base import HostInfo, TaskOutcome, VmTask, vm_name
from optlease.enact import base as task
from optlease.engine.clock import RealClock
from optlease.engine.log import LEVELS, EventLog
from optlease.engine.loop import Stepper, cancel
from optlease.engine.persist import Store
from optlease.errors import InputError
from optlease.formats.config import Config
from optlease.scheduling.leasesched import LeaseScheduler
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.records import Lease

S = LeaseState
SUSPENDED = (S.SUSPENDING, S.SUSPENDED_PENDING, S.SUSPENDED_QUEUED, S.SUSPENDED_SCHEDULED, S.MIGRATING)


class SimulatedEnactor:
    """Enactment of `mode: simulated`: every task succeeds at once. Keeps when each VM started (for benchmarks)."""

    def __init__(self, site: Site) -> None:
        self._hosts = {f"simul-{i}": HostInfo(f"simul-{i}", dict(site.capacity(i)), True, time.time())
                       for i in site.node_ids}
        self._running: dict[str, tuple[str, str]] = {}
        self._outcomes: list[TaskOutcome] = []
        self.started_at: dict[str, float] = {}
        self.submitted = 0

    def submit(self, tasks: list[VmTask]) -> None:
        now = time.time()
        for t in tasks:
            self.submitted += 1
            if t.kind in (task.START, task.RESUME):
                self._running[t.vm] = (t.host, "running")
                self.started_at.setdefault(t.vm, now)
            elif t.kind == task.STOP:
                self._running.pop(t.vm, None)
            elif t.kind == task.SUSPEND:
                self._running[t.vm] = (t.host, "saved")
            elif t.kind == task.MIGRATE:
                self._running[t.vm] = (t.destination or t.host, self._running.get(t.vm, ("", "saved"))[1])
            self._outcomes.append(TaskOutcome(t, True))

    def outcomes(self) -> list[TaskOutcome]:
        out, self._outcomes = self._outcomes, []
        return out

    def hosts(self) -> dict[str, HostInfo]:
        return dict(self._hosts)

    def running(self) -> dict[str, tuple[str, str]]:
        return dict(self._running)

    def close(self) -> None:
        pass


def make_enactor(cfg: Config, site: Site):
    """The Enactor the configuration asks for: simulated (answers at once) or FAST over MQTT."""
    mode = cfg.get("general", "mode")
    if mode == "simulated":
        return SimulatedEnactor(site)
    try:
        from optlease.enact.mqtt import MqttEnactor  # written separately; loaded only for mode: fast
    except ImportError:
        raise InputError("[general] mode: fast needs the MQTT enactment (optlease.enact.mqtt), which this "
                         "installation does not have", cfg.path) from None
    return MqttEnactor.from_config(cfg)


def site_from_config(cfg: Config) -> Site:
    resources = cfg.get("simulation", "resources")
    if not resources or resources == "in-tracefile":
        raise InputError("the daemon needs [simulation] resources as `<numnodes> CPU:<n> Memory:<n>`", cfg.path)
    try:
        return Site.parse_resources(resources)
    except InputError as exc:
        raise InputError(f"[simulation] resources: {exc.message}", cfg.path) from None


class Manager:
    def __init__(self, cfg: Config, out: TextIO | None = None, enactor=None) -> None:
        self.cfg = cfg
        self.site = site_from_config(cfg)
        self.opts = SchedulingOptions.from_config(cfg)
        policies = Policies(self.opts.policy_admission, self.opts.policy_preemption, self.opts.policy_host_selection)
        persistence = cfg.get("general", "persistence-file")
        self.store = Store(None if persistence == "none" else str(cfg.resolve(persistence)))
        journal = self.store.load()
        self.epoch = journal.epoch if journal.epoch is not None else int(time.time())
        if journal.epoch is None:
            self.store.set_epoch(self.epoch)
        self.origin = datetime.fromtimestamp(self.epoch)
        self.log = EventLog(self.origin, cfg.get("general", "loglevel"), None)
        self.sched = LeaseScheduler(self.site, self.opts, policies, self.log)
        self.stepper = Stepper(self.sched)
        self.all: dict[int, Lease] = {}
        self.inbox: list[Lease] = []
        self.last_t = 0
        self._finished_seen = 0
        self.notes: list[str] = []
        self._replay(journal)
        self.next_id = self.store.next_id()
        self._set_log(out)
        self.clock = RealClock(self.epoch, cfg.get("simulation", "time-scale"),
                               cfg.get("scheduling", "wakeup-interval"))
        self.clock.current = max(self.clock.current, self.last_t)
        self.lock = threading.RLock()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.enactor = enactor if enactor is not None else make_enactor(cfg, self.site)
        self.host_names = list(self.enactor.hosts()) or [f"node-{i}" for i in self.site.node_ids]
        self.submitted_at: dict[int, float] = {}
        self._thread: threading.Thread | None = None

    def _set_log(self, out: TextIO | None) -> None:
        log = self.log
        log.out = out
        log.info_on = out is not None and log.threshold <= LEVELS["INFO"]
        log.debug_on = out is not None and log.threshold <= LEVELS["DEBUG"]

    def _new_lease(self, req: LeaseRequest) -> Lease:
        lease = Lease(req, {v: self.sched.table.vector(d) for v, d in enumerate(req.vms, start=1)})
        self.all[req.id] = lease
        return lease

    def _replay(self, journal) -> None:
        """Rebuild the scheduler from the journal: the same inputs at the same instants."""
        for t, kind, lease_id in journal.events:
            if kind == "request":
                self.inbox.append(self._new_lease(journal.requests[lease_id]))
            elif kind == "cancel":
                self._cancel(self.all[lease_id], t)
            else:
                self._run_step(t)
        self._finished_seen = len(self.sched.finished)
        self.store.remember(list(self.all.values()))
        for lease_id, state in journal.states.items():
            lease = self.all.get(lease_id)
            if lease is None or lease.state.value != state:
                self.notes.append(f"lease {lease_id}: recorded as {state}, replayed as "
                                  f"{lease.state.value if lease else 'missing'}")
        if journal.events:
            self.notes.append(f"reloaded {len(self.all)} leases from {len(journal.events)} journal entries")

    def _run_step(self, t: int) -> list[Lease]:
        arrivals = [lease for lease in self.inbox if lease.req.arrival <= t]
        if arrivals:
            self.inbox = [lease for lease in self.inbox if lease.req.arrival > t]
        self.stepper.step(t, arrivals)
        self.last_t = t
        fin = self.sched.finished
        changed = list(self.sched.leases.values()) + fin[self._finished_seen:]
        self._finished_seen = len(fin)
        return changed

    def _cancel(self, lease: Lease, t: int) -> None:
        if lease in self.inbox:
            self.inbox.remove(lease)
        self.log.now = t
        cancel(self.sched, lease, t)
        self._finished_seen = len(self.sched.finished)

    # -- what the API calls (under the lock) -------------------------------------------------------------------
    def now(self) -> int:
        return max(self.clock.now(), self.last_t)

    def submit(self, make_request, xml: str | None = None) -> int:
        """`make_request(id, arrival)` builds the request (raising InputError); it is committed, then queued."""
        with self.lock:
            arrival = self.now()
            req = make_request(self.next_id, arrival)
            self.store.add_request(req, xml)
            self.next_id += 1
            self.inbox.append(self._new_lease(req))
            self.submitted_at[req.id] = time.time()
        self.wake.set()
        return req.id

    def cancel(self, lease_id: int) -> None:
        with self.lock:
            lease = self.all.get(lease_id)
            if lease is None:
                raise InputError(f"no lease {lease_id}")
            if lease.state in (S.DONE, S.CANCELLED, S.REJECTED, S.FAILED):
                raise InputError(f"lease {lease_id} is already {lease.state.value}")
            t = self.now()
            self._cancel(lease, t)
            self.store.add_cancel(t, lease)
            self._enact()
        self.wake.set()

    # -- the loop ----------------------------------------------------------------------------------------------
    def step(self, t: int) -> None:
        with self.lock:
            changed = self._run_step(t)
            self.store.add_step(t, changed)
            self._enact()

    def run(self) -> None:
        self.log.status("CLOCK", "Starting real clock")
        while not self.stopping.is_set():
            with self.lock:
                nxt = self.stepper.next_event(self.last_t)
                if self.inbox:
                    nxt = self.last_t if nxt is None else min(nxt, max(self.last_t, self.clock.now()))
            t = self.clock.advance(nxt, self.wake)
            if self.stopping.is_set():
                break
            try:
                self.step(max(t, self.last_t))
            except Exception as exc:  # a bug in one round must not take the daemon down: say it and go on
                self.log.status("RM", f"scheduling step at {self.log.t(t)} failed: {type(exc).__name__}: {exc}")
                time.sleep(0.05)
        self.log.status("CLOCK", "Real clock has stopped")

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="optlease-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self.lock:
            self.enactor.close()
            self.store.close()

    # -- enactment: bring the hosts to the plan ---------------------------------------------------------------
    def host(self, pnode: int) -> str:
        return self.host_names[pnode - 1] if pnode <= len(self.host_names) else f"node-{pnode}"

    def _enact(self) -> None:
        self.enactor.outcomes()
        running = self.enactor.running()
        want: dict[str, tuple[str, str, Lease, int]] = {}
        for lease in self.sched.leases.values():
            if lease.state is S.ACTIVE:
                for vnode, pnode in lease.last_vmrr().mapping.items():
                    want[vm_name(lease.id, vnode)] = (self.host(pnode), "running", lease, vnode)
            elif lease.state in SUSPENDED and lease.image_nodes:
                for vnode, pnode in lease.image_nodes.items():
                    want[vm_name(lease.id, vnode)] = (self.host(pnode), "saved", lease, vnode)
            elif lease.state is S.SUSPENDING:
                for vnode, pnode in lease.last_vmrr().mapping.items():
                    want[vm_name(lease.id, vnode)] = (self.host(pnode), "saved", lease, vnode)
        tasks: list[VmTask] = []
        for vm, (host, state) in running.items():
            if vm not in want:
                tasks.append(VmTask(task.STOP, *_ids(vm), host))
        for vm, (host, state, lease, vnode) in want.items():
            have = running.get(vm)
            if have is None:
                if state == "running":
                    demand = lease.req.vms[vnode - 1]
                    tasks.append(VmTask(task.START, lease.id, vnode, host, memory_mb=demand.get("Memory", 0),
                                        vcpus=max(1, demand.get("CPU", 100) // 100)))
                continue
            if have[0] != host:
                tasks.append(VmTask(task.MIGRATE, lease.id, vnode, have[0], destination=host))
            if have[1] == "running" and state == "saved":
                tasks.append(VmTask(task.SUSPEND, lease.id, vnode, host))
            elif have[1] != "running" and state == "running":
                tasks.append(VmTask(task.RESUME, lease.id, vnode, host))
        if tasks:
            self.enactor.submit(tasks)


def _ids(vm: str) -> tuple[int, int]:
    parts = vm.split("-")
    try:
        return int(parts[1]), int(parts[3])
    except (IndexError, ValueError):
        return 0, 0
