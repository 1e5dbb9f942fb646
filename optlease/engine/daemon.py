"""The live lease manager: the simulator's step on a real clock, requests from the API, every change on disk.

A `Manager` owns one LeaseScheduler. All access to it goes through `manager.lock`. Its loop thread sleeps on the
real clock until the next planned event, a new request or the wakeup interval, then runs the step the simulator
runs, commits what changed, and hands enactment the tasks that bring the hosts to the new plan.

Every change is atomic: applied in memory and committed to the journal, or the daemon stops. A change that raises
or cannot be written leaves memory ahead of the disk, so the manager then refuses every caller (one line) and
stops; a restart replays the journal, which holds every change up to the one before, and catches up.
"""
from __future__ import annotations

import gc
import os
import threading
import time
from datetime import datetime
from typing import TextIO

from optlease.domain.lease import LeaseRequest, LeaseState
from optlease.enact.base import parse_vm_name
from optlease.engine import checkpoint_fork
from optlease.engine.clock import RealClock
from optlease.engine.daemon_site import FROM_AGENTS, make_enactor, site_from_agents, site_from_config
from optlease.eventlog import LEVELS, EventLog
from optlease.engine.atomic import Atomic, GuardedLock, Stopped
from optlease.engine.decisions import Decisions
from optlease.engine.loop import Stepper, cancel, defer, fail, requeue
from optlease.engine.checkpointing import Checkpointing
from optlease.engine.enactment import Enactment
from optlease.engine.intake import Intake
from optlease.engine.recovery import Recovery
from optlease.engine.lease_index import LeaseIndex
from optlease.engine.lease_table import LeaseTable
from optlease.engine.lease_views import LeaseViews
from optlease.engine.plan_view import PlanView, ReportIndex
from optlease.engine.persist import Store
from optlease.errors import InputError
from optlease.formats.config import Config
from optlease.scheduling.leasesched import LeaseScheduler
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.records import Lease

S = LeaseState


class Manager(Atomic, Intake, Recovery, Enactment, Checkpointing):
    def __init__(self, cfg: Config, out: TextIO | None = None, enactor=None, indexed: bool = True,
                 forked_checkpoints: bool = True) -> None:
        self.cfg = cfg
        # `forked_checkpoints`: a forked child writes each checkpoint while the daemon serves; False pickles it in
        # the daemon's own turn, every request waiting (the reference the benchmark compares with)
        self.forked_checkpoints = forked_checkpoints and hasattr(os, "fork")
        self._child: checkpoint_fork.Child | None = None     # the checkpoint a child is writing
        self._collecting = threading.Lock()                  # one thread commits a child's checkpoint
        self._checkpoint_retry = 0        # after a checkpoint that failed: the journal entries before the next try
        self.checkpoint_stats: dict = {}  # what the last checkpoint cost (for benchmarks)
        # `indexed`: a step and an enactment pass read what changed from indexes (the leases by state, the hosts'
        # reports as they change, the hosts as of their last change); False walks every lease and host each time,
        # as a reference that tests compare the indexed daemon with
        self.indexed = indexed
        if cfg.get("simulation", "resources") == FROM_AGENTS:
            # the site is what the agents say they are: the enactor comes first, to hear them
            if enactor is None:
                enactor = make_enactor(cfg, None)
            try:
                self.site = site_from_agents(cfg, enactor)
            except InputError:
                enactor.close()
                raise
        else:
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
        self.sched.table.changed = set()
        self.view = PlanView({})      # node -> host names once they are known (below)
        self.views = LeaseViews(self.origin)     # what the API shows, published after each commit
        self.table = LeaseTable(self.views)      # the list-leases table, formatted by block as views change
        self.index = LeaseIndex()                # the leases in the system by state
        self.stepper = Stepper(self.sched)
        self.decisions = Decisions(None if self.stepper.planner.name == "greedy" else self.stepper.planner)
        self.all: dict[int, Lease] = {}
        self.inbox: list[Lease] = []
        self.last_t = 0
        self._finished_seen = 0
        self.notes: list[str] = []
        self.lock = GuardedLock()
        # The intake lock guards the requests on their way in (next_id, the staged ones, the inbox, the instant of
        # the step under way); a request takes it, never the manager's lock. Order: lock, then _intake.
        self._intake = threading.Lock()
        self._staged: list[tuple] = []           # (request, its XML): not yet committed, in id order
        self._took = 0                           # the last request id the last step could take
        self._last_id = 0                        # the last request committed
        self._commits = threading.Condition()    # guards the two below (never taken while waiting for `lock`)
        self._committing = False                 # a batch of staged requests is being written
        self._committed = 0                      # every staged request up to this id is on disk
        # A batch of requests is stepped in its own transaction when the scheduler is free (intake._step_with), once
        # the loop runs (`start`): before, whoever drives the manager chooses the instants
        self._fold_steps = False
        self._sleeping_to = 0                    # the instant the loop sleeps until
        self._loop_takes = False                 # a batch was handed to the loop: its next step commits it
        self._replay(journal)
        self.index.rebuild(self.sched.leases)
        self.views.publish_new(self.all.values())
        self.views.publish()
        # What the replay built lives as long as the daemon: out of the collector's sight, so that no full
        # collection walks a hundred thousand leases again in the middle of a request (until the first forked
        # checkpoint is done: checkpoint_fork.release gives every frozen object back to the collector).
        gc.collect()
        gc.freeze()
        self.next_id = self.store.next_id()
        self._last_id = self.next_id - 1
        self._set_log(out)
        self.clock = RealClock(self.epoch, cfg.get("simulation", "time-scale"),
                               cfg.get("scheduling", "wakeup-interval"))
        # the clock resumes at the last journaled step: the instants missed since are stepped, not skipped
        self.clock.current = self.last_t
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.enact_wake = threading.Event()
        self.fatal: str | None = None          # why the daemon stopped (an error, or lease-failure-handling: exit)
        self.fatal_rc = 0                      # the exit status that goes with it
        self.migration_type = "warm"           # Haizea migrates suspended images only; they always move warm
        self._said: set[str] = set()
        self._dirty = True            # a step happened since the last enactment pass
        self.enactor = enactor if enactor is not None else make_enactor(cfg, self.site)
        self.host_names = self._host_names(cfg)
        if hasattr(self.enactor, "on_outcome"):
            self.enactor.on_outcome = self.enact_wake.set     # a result wakes the enactment pass at once
        self.view.host_of = dict(enumerate(self.host_names, start=1))
        self._last_running: dict = {}
        self._mirror: dict | None = None    # indexed: what the hosts report, kept from the enactor's deltas
        self._hosts_seen: tuple | None = None    # (hosts_version, hosts, names alive) as last read
        self._watched: tuple | None = None  # (hosts_version, nodes down) at the last walk over the hosts
        self._reports = ReportIndex()       # what the hosts report, host by host
        self._last_hosts: tuple = ()
        self._unsettled: set[str] = set()    # VMs that differed from the plan at the last pass
        self._awaiting: dict[str, int] = {}  # VMs the plan runs that no host has reported yet -> since when
        self._unstarted: set[str] = set()    # VMs whose planned run ended before any host started them
        self.submitted_at: dict[int, float] = {}
        self._thread: threading.Thread | None = None
        self._enact_thread: threading.Thread | None = None
        wait = getattr(self.enactor, "wait_inventory", None)
        if wait is not None:
            # what the hosts run before the first pass: after a restart, the plan is compared with the truth
            timeout = min(15.0, 2 * float(getattr(self.enactor, "task_timeout", 5.0)))
            if not wait(self.host_names, timeout):
                missing = [h for h in self.host_names if h not in getattr(self.enactor, "listed", {})]
                self.notes.append(f"no inventory from {' '.join(missing)} within {timeout:g} s: "
                                  "leases planned there fail until they answer")
            ours = sorted((vm, where) for vm, where in self.enactor.running().items() if parse_vm_name(vm))
            self.notes.append(f"hosts report {len(ours)} optlease domains"
                              + "".join(f"; {vm} {state} on {host}" for vm, (host, state) in ours))

    def _host_names(self, cfg: Config) -> list[str]:
        """Node i of the site is host_names[i - 1]: `[mqtt] hosts` in mode fast, the enactor's hosts otherwise."""
        given = (cfg.get("mqtt", "hosts") or "").split() if cfg.get("general", "mode") == "fast" else []
        if given:
            if len(given) != len(self.site.node_ids):
                raise InputError(f"[mqtt] hosts names {len(given)} hosts; [simulation] resources has "
                                 f"{len(self.site.node_ids)} nodes", cfg.path)
            return given
        if cfg.get("general", "mode") == "fast":
            raise InputError("[general] mode: fast needs [mqtt] hosts: the agents' host names in node order",
                             cfg.path)
        return list(self.enactor.hosts()) or [f"node-{i}" for i in self.site.node_ids]

    def _set_log(self, out: TextIO | None) -> None:
        log = self.log
        log.out = out
        log.info_on = out is not None and log.threshold <= LEVELS["INFO"]
        log.debug_on = out is not None and log.threshold <= LEVELS["DEBUG"]

    def _new_lease(self, req: LeaseRequest) -> Lease:
        lease = Lease(req, {v: self.sched.table.vector(d) for v, d in enumerate(req.vms, start=1)})
        self.all[req.id] = lease
        return lease

    def _touch(self, leases) -> None:
        """These leases changed: enactment looks at them again, and the API shows them once committed."""
        leases = list(leases)
        self.view.touch(leases)
        self.views.touch(leases)
        self.index.note(leases, self.sched.leases)

    def _run_step(self, t: int, upto: int | None = None) -> list[Lease]:
        """One step at t; the leases it changed: those that arrived, those with a reservation starting or ending at
        t, those whose reservations the step added, moved or dropped (the slot table's `changed`), and those that
        finished."""
        with self._intake:
            # the requests committed so far, and (replaying) no later one: requests are committed while a step
            # runs, so the journal may hold them before the step's entry, which says up to which id it took
            self._took = self._last_id if upto is None else upto
            taken = [lease for lease in self.inbox if lease.req.arrival <= t and lease.id <= self._took]
            if taken:
                ids = {lease.id for lease in taken}
                self.inbox = [lease for lease in self.inbox if lease.id not in ids]
            arrivals = taken
        table = self.sched.table
        at_t = [rr.lease for rr in table.starting_at(t)] + [rr.lease for rr in table.ending_at(t)]
        self.stepper.step(t, arrivals)
        self.last_t = t
        fin = self.sched.finished
        # in id order: the slot table's `changed` is a set, and what a late or missed step says and takes back (in
        # this order) must not depend on where the leases sit in memory
        changed = sorted({id(lease): lease for lease in (*arrivals, *at_t, *table.changed,
                                                         *fin[self._finished_seen:])}.values(), key=lambda x: x.id)
        table.changed.clear()
        self._finished_seen = len(fin)
        self._touch(changed)
        return changed

    def _cancel(self, lease: Lease, t: int) -> None:
        with self._intake:
            if lease in self.inbox:
                self.inbox.remove(lease)
        self.log.now = t
        cancel(self.sched, lease, t)
        self._finished_seen = len(self.sched.finished)
        self._touch([lease])

    # -- what the API calls (under the lock) -------------------------------------------------------------------
    def cancel(self, lease_id: int) -> None:
        with self.lock:
            lease = self.all.get(lease_id)
            if lease is None:
                raise InputError(f"no lease {lease_id}")
            if lease.state in (S.DONE, S.CANCELLED, S.REJECTED, S.FAILED):
                raise InputError(f"lease {lease_id} is already {lease.state.value}")
            t = self.now()
            with self._atomic(f"cancelling lease {lease_id}"):
                self._cancel(lease, t)
                self.store.add_cancel(t, lease)
                self._enact()
        self.wake.set()

    # -- the loop ----------------------------------------------------------------------------------------------
    def step(self, t: int, catching_up: bool = False, requests: list[tuple] | None = None) -> None:
        """One step at t, committed with what its round decided, then an enactment pass (none while catching up:
        the hosts are brought to the plan at now, not to each missed instant's). `requests`: new requests (the
        caller holds the commit turn) committed in the step's transaction, before it; None: in the live loop with
        greedy rounds, the step takes the commit turn and every staged request itself (intake)."""
        with self.lock:
            own_turn = requests is None and self._fold_steps and not catching_up
            if own_turn:
                requests = self._take_turn()
            top = 0
            try:
                self._step(t, catching_up, requests or (), holding_turn=requests is not None)
                top = requests[-1][0].id if requests else 0
            finally:
                if own_turn:
                    self._give_turn(top)

    def _step(self, t: int, catching_up: bool, requests: list[tuple], holding_turn: bool) -> None:
        with self.lock:
            late = self.clock.now() - t if catching_up else self._late(t)
            # the state of each lease before the step, for what a late or missed step says and takes back: the
            # index records it for the leases the step changes (the only ones asked about)
            before = self._states() if (late or catching_up) and not self.indexed else None
            self.index.record()
            with self._atomic(f"the scheduling step at {self.log.t(t)}"):
                self._dirty = True
                if requests:
                    self._admit(requests)
                self.decisions.begin()
                changed = self._run_step(t)
                self.store.add_step(t, changed, self.decisions.recorded, self._took, requests)
            recorded = self.index.recorded()
            before = recorded if before is None else before
            if catching_up and not getattr(self.enactor, "simulated", False):
                self._defer_unrun(t, before, changed)
            if late:
                self._say_late(t, late, before, changed)
            if self.checkpoint_due():
                with self._atomic("the checkpoint"):
                    self.write_checkpoint(holding_turn)
            if self._child is not None and self._enact_thread is None:
                self.collect_checkpoint()       # before the loop runs, no other thread collects it
            if not catching_up:
                with self._atomic("enactment"):
                    self._enact()
        self.enact_wake.set()

    def _states(self) -> dict[int, LeaseState]:
        """Every lease in the system and its state (a walk over all of them: the unindexed reference)."""
        return {i: lease.state for i, lease in self.sched.leases.items()}

    def run(self) -> None:
        """The scheduling thread. Anything it raises stops the daemon with one line: never a frozen state."""
        try:
            self._run()
        except Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - the thread dies: say why, and take the daemon down with it
            try:
                self._die(f"the scheduling thread stopped: {type(exc).__name__}: {exc}")
            except Stopped:
                pass
        finally:
            # requests handed to the loop are committed by their clients again, on their own
            self._fold_steps = False
            with self._commits:
                self._loop_takes = False
                self._commits.notify_all()

    def _run(self) -> None:
        self.log.status("CLOCK", "Starting real clock")
        while not self.stopping.is_set():
            with self.lock:
                nxt = self.next_instant()
                awake = self.clock.now() + self.clock.wakeup
                self._sleeping_to = awake if nxt is None else min(nxt, awake)
            t = self.clock.advance(nxt, self.wake)
            if self.stopping.is_set():
                break
            with self.lock:
                # the plan may have changed while the loop slept (a request stepped on its client's thread) and
                # put an instant before the one it slept for: it is stepped first, never skipped
                due = self.next_instant()
                if due is not None and due < t:
                    t = due
                self.step(max(t, self.last_t))
        self.log.status("CLOCK", "Real clock has stopped")

    def start(self) -> None:
        # not with CP-SAT rounds, which last up to their time limit: a client is answered without waiting for one
        self._fold_steps = self.stepper.planner.name == "greedy"
        self._thread = threading.Thread(target=self.run, name="optlease-loop", daemon=True)
        self._thread.start()
        self._enact_thread = threading.Thread(target=self._enact_loop, name="optlease-enact", daemon=True)
        self._enact_thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        self.enact_wake.set()
        for thread in (self._thread, self._enact_thread):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=10)
        if self._child is not None and self._collecting.acquire(timeout=60):
            # a checkpoint not yet committed is dropped: the journal holds everything it would have held
            if self._child is not None:
                checkpoint_fork.kill(self._child)
                self._child = None
            self._collecting.release()
        with self.lock.raw:
            self.enactor.close()
            self.store.close()

    def _fail(self, lease: Lease, t: int, why: str) -> None:
        self.log.now = t
        fail(self.sched, lease, t, why)
        self._finished_seen = len(self.sched.finished)
        self._touch([lease])

    def _defer(self, lease: Lease, t: int) -> None:
        self.log.now = t
        defer(self.sched, lease, t)
        self._touch([lease])

    def _requeue(self, lease: Lease, t: int) -> None:
        self.log.now = t
        requeue(self.sched, lease, t)
        self._touch([lease])
