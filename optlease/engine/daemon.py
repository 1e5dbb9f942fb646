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
import threading
import time
from dataclasses import replace
from datetime import datetime
from typing import TextIO

from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from optlease.enact.base import TaskOutcome, parse_vm_name
from optlease.engine import checkpoint
from optlease.engine.clock import RealClock
from optlease.engine.daemon_site import FROM_AGENTS, make_enactor, site_from_agents, site_from_config
from optlease.eventlog import LEVELS, EventLog
from optlease.engine.atomic import Atomic, GuardedLock, Stopped
from optlease.engine.decisions import Decisions
from optlease.engine.loop import Stepper, cancel, defer, fail, leases_on, node_down, node_up, requeue
from optlease.engine.recovery import Recovery
from optlease.engine.lease_views import LeaseViews
from optlease.engine.plan_view import PlanView, ReportIndex
from optlease.reconcile import _REPORTED as REPORTED_STATES, ABSENT, RUNNING, reconcile
from optlease.engine.persist import Store, StoreError
from optlease.errors import InputError
from optlease.formats.config import Config
from optlease.scheduling.leasesched import LeaseScheduler
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.records import Lease

S = LeaseState
ENACT_POLL = 0.1          # seconds between enactment passes while the scheduler sleeps
MAX_REQUEUES = 3          # a best-effort lease whose host died is requeued this often, then it fails


class Manager(Atomic, Recovery):
    def __init__(self, cfg: Config, out: TextIO | None = None, enactor=None) -> None:
        self.cfg = cfg
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
        self._replay(journal)
        self.views.publish_new(self.all.values())
        self.views.publish()
        # What the replay built lives as long as the daemon: out of the collector's sight, so that no full
        # collection walks a hundred thousand leases again in the middle of a request.
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
        self._reports = ReportIndex()       # what the hosts report, host by host
        self._last_hosts: tuple = ()
        self._unsettled: set[str] = set()    # VMs that differed from the plan at the last pass
        self._awaiting: dict[str, int] = {}  # VMs the plan runs that no host has reported yet -> since when
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
        changed = list({id(lease): lease for lease in (*arrivals, *at_t, *table.changed,
                                                       *fin[self._finished_seen:])}.values())
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
    def now(self) -> int:
        return max(self.clock.now(), self.last_t)

    def submit(self, make_request, xml: str | None = None) -> int:
        """`make_request(id, arrival)` builds the request (raising InputError); it is committed, then queued, and
        only then is its id returned. The manager's lock is not taken: a request waits for its commit only, never
        for a scheduling round or enactment.

        Group commit: requests that arrive while another batch is being written wait, then go to disk together in
        one transaction (one fsync for the batch instead of one each). A request is in no step and no answer
        before its batch is committed. A step takes the requests committed before it began, and its journal entry
        says up to which id: a batch committed while it runs may be journaled before it, and a replay steps it
        where the daemon did, at the next step."""
        if self.lock.refused is not None:
            raise Stopped(f"the lease manager has stopped: {self.lock.refused}")
        arrival = self.now()
        req = make_request(0, arrival)      # parsed before any lock is taken: nobody waits on a parser
        with self._intake:
            if arrival < self.last_t:       # a step ran meanwhile: the request arrives after it
                req = make_request(self.next_id, self.now())
            else:
                req = replace(req, id=self.next_id)
            self.next_id += 1
            self._staged.append((req, xml))
            self.submitted_at[req.id] = time.time()
        self._commit_staged(req.id)
        self.wake.set()
        return req.id

    def _commit_staged(self, upto: int) -> None:
        """Return once the request `upto` is committed: the first caller to find no batch under way writes every
        request staged so far; the others wait for it and go in the next batch if theirs missed this one."""
        with self._commits:
            while self._committed < upto:
                if self.lock.refused is not None:   # the batch it was in failed
                    raise Stopped(f"the lease manager has stopped: {self.lock.refused}")
                if not self._committing:
                    self._committing = True
                    break
                self._commits.wait()
            else:
                return
        top, failed = 0, None
        try:
            # The batch is written without the intake lock: requests keep being staged, and a step takes what was
            # committed before, while the disk syncs. No step sees the batch before it is on disk.
            with self._intake:
                reqs, self._staged = self._staged, []
            try:
                if reqs:
                    self.store.add_requests(reqs)
            except StoreError as exc:
                failed = f"storing requests {reqs[0][0].id} to {reqs[-1][0].id}: {exc}"
            else:
                leases = [self._new_lease(req) for req, _ in reqs]
                self.views.publish_new(leases)      # committed, and no step can see them yet
                with self._intake:
                    self.inbox.extend(leases)
                    top = reqs[-1][0].id if reqs else 0
                    self._last_id = max(self._last_id, top)
            if failed is not None:
                self._die(failed)       # after the intake lock is given back: _die waits for the manager's
        finally:
            with self._commits:
                self._committing = False
                self._committed = max(self._committed, top)
                self._commits.notify_all()

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
    def step(self, t: int, catching_up: bool = False) -> None:
        """One step at t, committed with what its round decided, then an enactment pass (none while catching up:
        the hosts are brought to the plan at now, not to each missed instant's)."""
        with self.lock:
            late = self.clock.now() - t if catching_up else self._late(t)
            before = {i: lease.state for i, lease in self.sched.leases.items()} if late or catching_up else {}
            with self._atomic(f"the scheduling step at {self.log.t(t)}"):
                self._dirty = True
                self.decisions.begin()
                changed = self._run_step(t)
                self.store.add_step(t, changed, self.decisions.recorded, self._took)
            if catching_up and not getattr(self.enactor, "simulated", False):
                self._defer_unrun(t, before, changed)
            if late:
                self._say_late(t, late, before, changed)
            if self.store.path and self.store.entries >= checkpoint.CHECKPOINT_EVERY:
                with self._atomic("the checkpoint"):
                    self.write_checkpoint()
            if not catching_up:
                with self._atomic("enactment"):
                    self._enact()
        self.enact_wake.set()

    def write_checkpoint(self) -> None:
        """Write a checkpoint of the live state and drop the journal entries it covers (lock held)."""
        began = time.perf_counter()
        with self._commits:     # no batch of requests on its way to disk meanwhile: the checkpoint has them all
            while self._committing:
                self._commits.wait()
            self._committing = True
        try:
            with self._intake:      # and none lands meanwhile
                body = checkpoint.dump(self)
                dropped = self.store.add_checkpoint(self._last_id, checkpoint.fingerprint(), body)
        finally:
            with self._commits:
                self._committing = False
                self._commits.notify_all()
        self.log.status("RM", f"checkpoint of {len(self.sched.leases) + len(self.inbox)} leases in the system "
                              f"({len(body) // 1024} KiB) replaces {dropped} journal entries, in "
                              f"{time.perf_counter() - began:.2f} s")

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

    def _run(self) -> None:
        self.log.status("CLOCK", "Starting real clock")
        while not self.stopping.is_set():
            with self.lock:
                nxt = self.next_instant()
            t = self.clock.advance(nxt, self.wake)
            if self.stopping.is_set():
                break
            self.step(max(t, self.last_t))
        self.log.status("CLOCK", "Real clock has stopped")

    def start(self) -> None:
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
        with self.lock.raw:
            self.enactor.close()
            self.store.close()

    # -- enactment: bring the hosts to the plan ---------------------------------------------------------------
    def host(self, pnode: int) -> str:
        return self.host_names[pnode - 1] if pnode <= len(self.host_names) else f"node-{pnode}"

    def _enact(self, only_on_news: bool = False) -> None:
        """One reconcile pass (lock held): read outcomes, then diff what the hosts run against the plan at the last
        step, for the VMs whose plan or report changed, and submit the ordered waves for those whose hosts have no
        task under way. Idempotent: a pass with nothing to do sends nothing, so it runs after every step and
        whenever enactment has news."""
        outcomes = self.enactor.outcomes()
        for outcome in outcomes:
            self._outcome(outcome)
        self._watch_hosts()
        pending = getattr(self.enactor, "pending", None)
        if self.stopping.is_set() or (pending is None and _busy(self.enactor)):
            return
        # Tasks under way: nothing new is planned for their VMs and hosts until they settle (what those hosts
        # report is about to change), anything elsewhere is planned now.
        held_hosts, held_vms = pending() if pending is not None else ((), ())
        changes = getattr(self.enactor, "running_changes", None)
        reported = changes() if changes is not None else None     # taken first: a later change is in the next
        running, hosts = self.enactor.running(), self.enactor.hosts()
        if reported is None:
            reported = {vm for vm, _ in running.items() ^ self._last_running.items()}
        self._reports.update(reported, running)
        table = self.sched.table
        self._touch(table.changed)
        table.changed.clear()
        moved = self.view.update(self.sched.leases, self.last_t)
        self._watch_starts(moved, running)
        alive = frozenset(h for h, info in hosts.items() if info.alive)
        down = frozenset(self.host(n) for n in table.down)
        # A pass with no news (no step since the last pass, no outcome, hosts and their reports unchanged) would
        # find nothing to do: skip it.
        if only_on_news and not self._dirty and not outcomes and not moved and not self._unsettled \
                and (alive, down) == self._last_hosts and not reported:
            return
        # Only VMs whose plan or report changed, or that differed last time, can differ now, unless hosts came
        # or went (then every VM is looked at).
        if (alive, down) != self._last_hosts:
            candidates = set(running) | set(self.view.desired)
        else:
            candidates = moved | self._unsettled | reported
        self._dirty, self._last_running, self._last_hosts = False, running, (alive, down)
        differ = self._differing(candidates, running, alive, down)
        self._unsettled = differ
        desired = self.view.desired
        where = {vm: {running.get(vm, (None, ""))[0], getattr(desired.get(vm), "host", None)} - {None}
                 for vm in differ}
        todo = [vm for vm in differ if vm not in held_vms and not where[vm] & set(held_hosts)]
        if not todo:
            return
        # The reconcile step orders tasks by the room on each host: it sees every VM on the hosts the differing VMs
        # are on or planned on, and nothing else (VMs elsewhere are as planned and weigh on no host concerned).
        concerned = set().union(*(where[vm] for vm in todo))
        actual = {vm: (host, state) for vm, (host, state) in self._reports.on(concerned, running)
                  if host not in down and state.lower() in REPORTED_STATES}
        wanted = {vm: desired[vm] for host in concerned for vm in self.view.on_host.get(host, ())}
        wanted.update((vm, desired[vm]) for vm in todo if vm in desired)
        buckets = reconcile(actual, wanted, hosts, self.migration_type)
        for vm, why in buckets.lost:
            self._lost(vm, why)
            self._dirty = True  # the plan changed under this pass
        if buckets.tasks:
            self.enactor.submit(buckets.tasks)

    def _watch_starts(self, moved: set[str], running: dict) -> None:
        """Say which VMs the plan stopped wanting before any host ran them: their start came too late (the hosts
        were slow, or busy with earlier tasks), so that part of the lease never ran. Such a start is never sent:
        the plan no longer has the VM running."""
        desired = self.view.desired
        for vm in moved:
            want = desired.get(vm)
            if want is not None and want.state == RUNNING and vm not in running:
                self._awaiting.setdefault(vm, self.last_t)
        for vm, since in list(self._awaiting.items()):
            have = running.get(vm)
            if have is not None:
                del self._awaiting[vm]      # it runs (or ran) there
                continue
            want = desired.get(vm)
            if want is None or want.state != RUNNING:
                del self._awaiting[vm]
                self.log.status("ENACT", f"{vm} was planned to run from {self.log.t(since)} to "
                                         f"{self.log.t(self.last_t)} but no host ran it in time: its start was "
                                         "never enacted")

    def _differing(self, candidates: set[str], running: dict, alive: frozenset, down: frozenset) -> set[str]:
        """The optlease VMs among `candidates` that are not where and as the plan has them (or are on a host that
        is not alive)."""
        differ = set()
        desired = self.view.desired
        for vm in candidates:
            if parse_vm_name(vm) is None:
                continue            # not an optlease VM: never touched
            have = running.get(vm)
            if have is not None and have[0] in down:
                have = None         # a silent host's VMs are gone: their leases were replanned when it went down
            if have is not None and have[1].lower() not in REPORTED_STATES:
                self._say(f"{vm} on {have[0]} is `{have[1]}`: left alone until it settles")
                have = None
            state = REPORTED_STATES[have[1].lower()] if have is not None else ABSENT
            host = have[0] if have is not None and state != ABSENT else None
            want = desired.get(vm)
            if (host, state) != ((want.host, want.state) if want is not None else (None, ABSENT)) \
                    or (host is not None and host not in alive):
                differ.add(vm)
        return differ

    def _enact_loop(self) -> None:
        """Enactment between steps: outcomes arrive and in-flight tasks finish while the scheduler sleeps. What it
        raises stops the daemon, as a failed step does."""
        while not self.stopping.is_set():
            self.enact_wake.wait(ENACT_POLL)
            self.enact_wake.clear()
            if self.stopping.is_set():
                break
            try:
                with self.lock, self._atomic("enactment"):
                    self._enact(only_on_news=True)
            except Stopped:
                break

    def _say(self, line: str) -> None:
        """A log line said once (a pass repeats itself until things change)."""
        if line not in self._said:
            self._said.add(line)
            self.log.status("ENACT", line)

    def _outcome(self, outcome: TaskOutcome) -> None:
        t = outcome.task
        if outcome.ok:
            self.log.info("ENACT", f"{t.kind} {t.vm} on {t.host}: done")
            return
        if outcome.skipped:       # never sent: the next pass sends it again if the plan still wants it
            return
        why = outcome.details or ("no result" if outcome.timed_out else "error")
        what = "timed out" if outcome.timed_out else "failed"
        self.log.status("ENACT", f"{t.kind} {t.vm} on {t.host} {what}: {why}")
        lease = self.sched.leases.get(t.lease_id)
        if lease is not None:
            self._lease_failed(lease, f"{t.kind} of {t.vm} on {t.host} {what}: {why}")

    def _lost(self, vm: str, why: str) -> None:
        """The reconcile step could not plan a task for this VM (a dead or unknown host, a lost image, no room)."""
        ids = parse_vm_name(vm)
        lease = self.sched.leases.get(ids[0]) if ids else None
        if lease is None or why.startswith("no room") or getattr(self.enactor, "simulated", False):
            self._say(f"{vm}: {why}; waiting")      # no room: what still runs there may yet leave
            return
        if why.startswith("on ") and not self._planned_on_dead(lease):
            self._say(f"{vm}: {why}")               # its host went away, and the plan has moved on
            return
        self.log.status("ENACT", f"{vm}: {why}")
        self._replan(lease, f"{vm} {why}")

    def _watch_hosts(self) -> None:
        """Hosts that went silent (heard once, then nothing for `[mqtt] host-timeout`) leave planning, and their
        leases are replanned; a host heard again comes back (lock held)."""
        if getattr(self.enactor, "simulated", False) or self.stopping.is_set():
            return
        hosts = self.enactor.hosts()
        for node, name in enumerate(self.host_names, start=1):
            info = hosts.get(name)
            if node in self.sched.table.down:
                if info is not None and info.alive:
                    self._node_up(node, name)
            elif info is not None and not info.alive and info.last_seen > 0:
                timeout = getattr(self.enactor, "host_timeout", None)
                self._node_down(node, name, "silent for more than " + (f"{timeout:g} s" if timeout else "its timeout"))

    def _node_down(self, node: int, name: str, why: str) -> None:
        t = self.last_t
        self.log.now = t
        victims = leases_on(self.sched, node)
        self.log.status("ENACT", f"host {name} is down ({why}): node {node} leaves planning; "
                                 f"{len(victims)} leases to replan")
        for lease in victims:
            if self.stopping.is_set():
                return      # lease-failure-handling said exit: the node stays up in the journal, as it was
            self._replan(lease, f"its host {name} went down ({why})")
        node_down(self.sched, node, t)
        self.store.add_node_event(t, "down", node)
        self.wake.set()

    def _node_up(self, node: int, name: str) -> None:
        t = self.last_t
        self.log.now = t
        node_up(self.sched, node, t)
        self.store.add_node_event(t, "up", node)
        self.log.status("ENACT", f"host {name} is back: node {node} is planned on again")
        self.wake.set()

    def _replan(self, lease: Lease, why: str) -> None:
        """A lease whose VMs are gone: a best-effort lease goes back to the queue (its work is lost), anything else
        fails per lease-failure-handling."""
        if lease.req.kind is LeaseKind.BEST_EFFORT and lease.state in (S.ACTIVE, S.SCHEDULED) \
                and lease.requeues < MAX_REQUEUES:
            t = self.last_t
            self._requeue(lease, t)
            self.store.add_event(t, "requeue", lease)
            self.log.status("ENACT", f"lease {lease.id} requeued: {why}")
            self.wake.set()
        else:
            self._lease_failed(lease, why)

    def _planned_on_dead(self, lease: Lease) -> bool:
        alive = {h for h, info in self.enactor.hosts().items() if info.alive}
        vmrr = lease.last_vmrr()
        return vmrr is not None and any(self.host(p) not in alive for p in vmrr.mapping.values())

    def _lease_failed(self, lease: Lease, why: str) -> None:
        """`[general] lease-failure-handling`: cancel fails the lease and frees its resources (the next round
        replans around it); exit and exit-raise stop the daemon cleanly with one line in the log."""
        handling = self.cfg.get("general", "lease-failure-handling")
        if handling != "cancel":
            self.fatal = f"lease {lease.id}: {why} (lease-failure-handling: {handling})"
            self.fatal_rc = 1 if handling == "exit-raise" else 0
            self.log.status("RM", f"stopping: {self.fatal}")
            self.stopping.set()
            self.wake.set()
            return
        t = self.last_t
        self._fail(lease, t, why)
        self.store.add_event(t, "fail", lease)
        self.log.status("RM", f"lease {lease.id} is {lease.state.value}: {why}")
        self.wake.set()

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


def _busy(enactor) -> bool:
    busy = getattr(enactor, "busy", None)
    return bool(busy()) if busy is not None else False
