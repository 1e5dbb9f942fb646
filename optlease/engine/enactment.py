"""Enactment: bringing the hosts to the plan, and what the daemon does when they do not follow it.

The half of the Manager that reconciles what the hosts report with where the plan puts each VM at the last step
(`reconcile`), submits the ordered waves to the enactor, and turns what comes back (errors, timeouts, VMs lost,
hosts gone silent or back) into journaled changes of the plan: a failed lease, a requeued one, a node leaving or
re-entering planning. A pass costs what changed: the VMs whose plan or report changed, on the hosts concerned.
"""
from __future__ import annotations

from optlease.domain.lease import LeaseKind, LeaseState
from optlease.enact.base import TaskOutcome, parse_vm_name
from optlease.engine.atomic import Stopped
from optlease.engine.loop import leases_on, node_down, node_up, on_node
from optlease.reconcile import _REPORTED as REPORTED_STATES, ABSENT, RUNNING, SUSPENDED, VmPlacement, placement, \
    reconcile
from optlease.scheduling.records import Lease

S = LeaseState
ENACT_POLL = 0.1          # seconds between enactment passes while the scheduler sleeps
MAX_REQUEUES = 3          # a best-effort lease whose host died is requeued this often, then it fails


class Enactment:
    """The enactment half of the Manager (a mixin: it needs the Manager's scheduler, enactor, plan view, store,
    lock, log and events, and its `_fail`, `_requeue` and `_touch`)."""

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
        running, reported = self._reported_now()
        hosts, alive = self._hosts_now()
        self._reports.update(reported, running)
        table = self.sched.table
        self._touch(table.changed)
        table.changed.clear()
        moved = self.view.update(self.sched.leases, self.last_t)
        self._watch_starts(moved, running)
        down = frozenset(self.host(n) for n in table.down)
        # A pass with no news (no step since the last pass, no outcome, hosts and their reports unchanged) would
        # find nothing to do: skip it.
        if only_on_news and not self._dirty and not outcomes and not moved and not self._unsettled \
                and (alive, down) == self._last_hosts and not reported:
            return
        candidates = self._candidates(moved | self._unsettled | reported, running, alive, down)
        self._dirty, self._last_hosts = False, (alive, down)
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
        # Tasks are for `todo` alone. Every other VM the step sees stays as its host reports it, weighing on that
        # host's room: one with a task under way, or whose other host has one, is a later pass's (planned from a
        # report that is about to change, it could look lost, or be sent a second task).
        wanted = {vm: self._kept(vm, desired[vm]) for vm in todo if vm in desired}
        todo_set = set(todo)
        wanted.update((vm, placement(have, desired.get(vm))) for vm, have in actual.items() if vm not in todo_set)
        if self.indexed:        # every host the reconcile step looks at is a concerned one
            hosts = {host: hosts[host] for host in concerned if host in hosts}
        buckets = reconcile(actual, wanted, hosts, self.migration_type)
        for vm, why in buckets.lost:
            self._lost(vm, why)
            self._dirty = True  # the plan changed under this pass
        if buckets.tasks:
            self.enactor.submit(buckets.tasks)

    def _candidates(self, changed: set[str], running: dict, alive: frozenset, down: frozenset) -> set[str]:
        """The VMs that may differ from the plan: those whose plan or report changed, or that differed last time
        (`changed`), and when hosts came or went, those reported or planned on them (walking: every VM)."""
        if (alive, down) == self._last_hosts:
            return changed
        if not self.indexed or not self._last_hosts:
            return set(running) | set(self.view.desired)
        came_or_went = (alive ^ self._last_hosts[0]) | (down ^ self._last_hosts[1])
        changed.update(vm for vm, _ in self._reports.on(came_or_went, running))
        changed.update(vm for host in came_or_went for vm in self.view.on_host.get(host, ()))
        return changed

    def _reported_now(self) -> tuple[dict, set[str]]:
        """What the hosts report (vm -> (host, state)) and the VMs whose report changed since the last pass. Indexed,
        the daemon keeps its own copy and applies what changed (a pass copies no 100,000 VMs); else a copy of
        `running()` each pass, and the changes the enactor names or the difference from the last pass's copy."""
        if self.indexed and _trusted(self.enactor, "running_delta", "running"):
            delta = self.enactor.running_delta()
            if self._mirror is None:
                # the first pass copies everything once, after the delta was taken: the copy is as new as it
                # (a change between the two is in both, and in the next delta again), so the delta is not applied
                self._mirror = dict(self.enactor.running())
                return self._mirror, set(delta)
            mirror = self._mirror
            for vm, where in delta.items():
                if where is None:
                    mirror.pop(vm, None)
                else:
                    mirror[vm] = where
            return mirror, set(delta)
        changes = getattr(self.enactor, "running_changes", None)
        reported = changes() if changes is not None else None     # taken first: a later change is in the next
        running = self.enactor.running()
        if reported is None:
            reported = {vm for vm, _ in running.items() ^ self._last_running.items()}
        self._last_running = running
        return running, reported

    def _hosts_now(self) -> tuple[dict, frozenset]:
        """The hosts (name -> HostInfo) and the names of those alive. Indexed, read again only when the enactor's
        `hosts_version` says they changed (a pass walks no 10,000 hosts); else read at every call."""
        version = self.enactor.hosts_version() \
            if self.indexed and _trusted(self.enactor, "hosts_version", "hosts") else None
        if version is None or self._hosts_seen is None or version != self._hosts_seen[0]:
            hosts = self.enactor.hosts()
            self._hosts_seen = (version, hosts, frozenset(h for h, info in hosts.items() if info.alive))
        return self._hosts_seen[1], self._hosts_seen[2]

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
                self._unstarted.add(vm)
                self.log.status("ENACT", f"{vm} was planned to run from {self.log.t(since)} to "
                                         f"{self.log.t(self.last_t)} but no host ran it in time: its start was "
                                         "never enacted")
        for vm in [vm for vm in self._unstarted
                   if vm in running or getattr(desired.get(vm), "state", ABSENT) == ABSENT]:
            self._unstarted.discard(vm)     # it runs now, or the plan has it nowhere (its lease over or requeued)

    def _kept(self, vm: str, want: VmPlacement | None) -> VmPlacement | None:
        """What the hosts must keep of a VM the plan wants `want`: a VM whose run ended before any host started it
        has no memory image to keep while the plan has it suspended (nothing of it ran), so it is absent until
        its resume, which starts it afresh, rather than an image lost."""
        if want is not None and want.state == SUSPENDED and vm in self._unstarted:
            return VmPlacement(None, ABSENT)
        return want

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
            want = self._kept(vm, desired.get(vm))
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
                if self._child is not None:
                    self._collect()
                with self.lock, self._atomic("enactment"):
                    self._enact(only_on_news=True)
            except Stopped:
                break

    def _collect(self) -> None:
        """Commit a checkpoint whose child is done (outside the manager's lock: requests go on meanwhile). What
        it raises beyond a failed checkpoint (a bug) stops the daemon."""
        try:
            self.collect_checkpoint()
        except Exception as exc:  # noqa: BLE001
            self._die(f"the checkpoint failed: {type(exc).__name__}: {exc}")

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
        hosts, _ = self._hosts_now()
        # with the hosts and the nodes down as at the last walk, a walk changes nothing
        seen = None if self._hosts_seen[0] is None else (self._hosts_seen[0], frozenset(self.sched.table.down))
        if seen is not None and seen == self._watched:
            return
        for node, name in enumerate(self.host_names, start=1):
            info = hosts.get(name)
            if node in self.sched.table.down:
                if info is not None and info.alive:
                    self._node_up(node, name)
            elif info is not None and not info.alive and info.last_seen > 0:
                timeout = getattr(self.enactor, "host_timeout", None)
                self._node_down(node, name, "silent for more than " + (f"{timeout:g} s" if timeout else "its timeout"))
        self._watched = None if seen is None else (seen[0], frozenset(self.sched.table.down))

    def _node_down(self, node: int, name: str, why: str) -> None:
        t = self.last_t
        self.log.now = t
        victims = self._leases_on(node)
        self.log.status("ENACT", f"host {name} is down ({why}): node {node} leaves planning; "
                                 f"{len(victims)} leases to replan")
        for lease in victims:
            if self.stopping.is_set():
                return      # lease-failure-handling said exit: the node stays up in the journal, as it was
            self._replan(lease, f"its host {name} went down ({why})")
        node_down(self.sched, node, t)
        self.store.add_node_event(t, "down", node)
        self.wake.set()

    def _leases_on(self, node: int) -> list[Lease]:
        """The leases in the system that a node going down takes with it, in id order. Indexed, those the lease
        index files under the node (after the changes since the last pass), filtered; else a walk over all."""
        if not self.indexed:
            return leases_on(self.sched, node)
        leases = self.sched.leases
        self.index.note(self.sched.table.changed, leases)
        found = (leases.get(i) for i in sorted(self.index.on_node.get(node, ())))
        return [lease for lease in found if lease is not None and on_node(lease, node)]

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


def _trusted(enactor, method: str, source: str) -> bool:
    """Whether the enactor's `method` speaks for its `source` (running, hosts): the class that defines one defines
    the other (a subclass that overrides `running()` alone inherits a delta that does not describe it)."""
    for cls in type(enactor).__mro__:
        if source in cls.__dict__:
            return method in cls.__dict__
    return False


def _busy(enactor) -> bool:
    busy = getattr(enactor, "busy", None)
    return bool(busy()) if busy is not None else False
