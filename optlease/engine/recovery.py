"""The daemon coming back: replaying its journal, then catching up on the instants it missed while it was down.

Replay feeds a fresh LeaseScheduler the journaled inputs at their instants, with the round model's journaled
decisions (engine.decisions), so the state is the one the daemon had acknowledged. A journal the daemon wrote
always replays; one that does not (edited by hand, another program's rows) is a one-line StoreError.

Catch-up then steps every instant between the last journaled step and now, in order, as the live clock would have:
what should have started starts, what should have ended ends, suspensions and resumes happen, each change logged
with how late it is. An advance reservation or immediate lease whose whole window passed while the daemon was down
cannot run any more: it fails, with that reason, before the first step. Best-effort leases follow their plan late
in mode simulated (the daemon is the hosts); in mode fast the hosts did nothing meanwhile, so a missed step that
starts, resumes or migrates one is taken back (`defer`): the lease is queued as it was and booked again.
"""
from __future__ import annotations

import gc
import time

from optlease.domain.lease import LeaseKind, LeaseState
from optlease.engine import checkpoint, checkpoint_fork
from optlease.engine.loop import node_down, node_up
from optlease.engine.persist import Journal, StoreError
from optlease.formats.timefmt import format_duration

S = LeaseState
UNRUN = (S.ACTIVE, S.RESUMING, S.MIGRATING)     # what a missed step may have begun that hosts had to carry out
LATE_REAL = 1.0     # a step in the live loop more than this many real seconds late is logged as late


class Recovery:
    """The replay and catch-up half of the Manager (a mixin: it needs the Manager's scheduler, store and log)."""

    def _replay(self, journal: Journal) -> None:
        """Rebuild the scheduler from the journal: its checkpoint, if it has one, then the same inputs at the same
        instants, with the same decisions. The cyclic garbage collector waits meanwhile: a restart makes objects by
        the hundred thousand and frees few, and each full collection would walk all of them again."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._rebuild(journal)
        finally:
            if collecting:
                gc.enable()

    def _rebuild(self, journal: Journal) -> None:
        if journal.checkpoint is not None:
            self._restore(journal)
        for seq, (t, kind, lease_id) in zip(journal.seqs, journal.events):
            try:
                self._replay_one(journal, seq, t, kind, lease_id)
            except StoreError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure here means the file is not what optlease wrote
                raise StoreError(f"journal entry {seq} ({kind} at {t}) does not replay: "
                                 f"{type(exc).__name__}: {exc}".replace("\n", " "), self.store.path) from None
        self.decisions.begin()
        self._finished_seen = len(self.sched.finished)
        self.store.remember(list(self.all.values()))
        for lease_id, state in journal.states.items():
            lease = self.all.get(lease_id)
            if lease is None or lease.state.value != state:
                self.notes.append(f"lease {lease_id}: recorded as {state}, replayed as "
                                  f"{lease.state.value if lease else 'missing'}")
        if self.decisions.diverged:
            self.notes.append(f"{self.decisions.diverged} replayed steps had no journaled round decisions: "
                              "they were solved again")
        if journal.events:
            self.notes.append(f"reloaded {len(self.all)} leases from {len(journal.events)} journal entries")

    def _restore(self, journal: Journal) -> None:
        """The live state of the journal's checkpoint, and the leases that had finished by then from their rows."""
        cp = journal.checkpoint
        if cp.build != checkpoint.fingerprint():
            raise StoreError(f"its checkpoint was written by another optlease build ({cp.build}; this one is "
                             f"{checkpoint.fingerprint()}): start the build that wrote it", self.store.path)
        rows, rrs = self.store.lease_rows()
        table = self.sched.table

        def finished(lease_id: int):
            lease = done.get(lease_id)
            if lease is None:
                req, row = journal.requests.get(lease_id), rows.get(lease_id)
                if req is None or row is None:
                    raise checkpoint.CheckpointError(f"lease {lease_id} has no request or no row")
                demands = {v: table.vector(d) for v, d in enumerate(req.vms, start=1)}
                lease = done[lease_id] = checkpoint.finished_lease(req, demands, row, rrs.get(lease_id, []))
            return lease

        done: dict = {}
        try:
            body = checkpoint_fork.unseal(cp.body) if cp.sealed else cp.body
            checkpoint.load(self, body, sorted(i for i in journal.requests if i <= cp.last_id), finished)
        except checkpoint.CheckpointError as exc:
            raise StoreError(f"its checkpoint (journal entry {cp.seq}) is not one optlease wrote: {exc}",
                             self.store.path) from None
        self.notes.append(f"checkpoint at journal entry {cp.seq}: {len(self.all) - len(done)} leases in the system, "
                          f"{len(done)} finished")

    def _replay_one(self, journal: Journal, seq: int, t: int, kind: str, lease_id: int | None) -> None:
        if kind == "request":
            self.inbox.append(self._new_lease(journal.requests[lease_id]))
        elif kind == "cancel":
            self._cancel(self.all[lease_id], t)
        elif kind == "fail":
            self._fail(self.all[lease_id], t, journal.reasons.get(lease_id) or "enactment failed")
        elif kind == "requeue":
            self._requeue(self.all[lease_id], t)
        elif kind == "defer":
            self._defer(self._deferrable(seq, t, lease_id), t)
        elif kind == "down":        # lease_id holds the node here
            self.log.now = t
            node_down(self.sched, lease_id, t)
        elif kind == "up":
            self.log.now = t
            node_up(self.sched, lease_id, t)
        else:
            self.decisions.begin(journal.decisions.get(seq, []))
            self._run_step(t, lease_id)     # a step's lease_id: the last request it could take (None: any)

    def _deferrable(self, seq: int, t: int, lease_id: int | None):
        """The lease a journaled `defer` names, if catch-up could have written it: a best-effort lease that the step
        just replayed, at the same instant, started, resumed or migrated. Anything else was not written by the
        daemon; replaying it would put an AR in the queue or a finished lease back in the system."""
        lease = self.all.get(lease_id) if isinstance(lease_id, int) else None
        if lease is None:
            why = f"it names no lease ({lease_id})" if lease_id is None else f"there is no lease {lease_id}"
        elif lease.kind is not LeaseKind.BEST_EFFORT:
            why = f"lease {lease_id} is {lease.kind.label}, not best-effort"
        elif lease.state not in UNRUN or lease.id not in self.sched.leases:
            why = f"lease {lease_id} is {lease.state.value}: nothing of it was begun"
        elif t != self.last_t:
            why = f"the last step replayed was at {self.last_t}, not at {t}"
        elif lease.state is not S.MIGRATING \
                and not any(rr.start == t for rr in (*lease.last_vmrr().pre, lease.last_vmrr())):
            # an active or resuming lease was begun by that step (catch-up steps each planned instant exactly);
            # a migration may span several instants, and one a step touched in the middle is deferred too
            why = f"lease {lease_id} was not begun at {t}"
        else:
            return lease
        raise StoreError(f"journal entry {seq} (defer at {t}) was not written by optlease: {why}", self.store.path)

    # -- catching up --------------------------------------------------------------------------------------------
    def next_instant(self) -> int | None:
        """The next instant to step at: the next planned event, or the arrival of the first request not yet
        stepped, whichever comes first (lock held)."""
        nxt = self.stepper.next_event(self.last_t)
        if self.inbox:
            first = max(self.last_t, min(lease.req.arrival for lease in self.inbox))
            nxt = first if nxt is None else min(nxt, first)
        return nxt

    def catch_up(self) -> None:
        """Step every instant missed since the last journaled step, in order, then step at now (before the API
        serves anyone, so that no request lands between missed instants)."""
        now = self.clock.now()
        if now <= self.last_t:
            return
        since, missed = self.last_t, 0
        with self.lock:
            missed += self._fail_missed_windows(since, now)
        while (t := self.next_instant()) is not None and t < now:
            self.step(t, catching_up=True)
            missed += 1
        self.step(now)
        if missed:
            self.log.status("RM", f"caught up from {self.log.t(since)} to {self.log.t(now)} "
                                  f"({format_duration(now - since)} while the lease manager was down): {missed} "
                                  "missed instants stepped or windows failed")

    def _fail_missed_windows(self, since: int, now: int) -> int:
        """An AR or immediate lease planned to start after the last step and to end by now never ran: it fails.
        How many did."""
        failed = 0
        if self.indexed:        # only scheduled leases can have such a window
            leases = [self.sched.leases[i] for i in self.index.ids_in(S.SCHEDULED)]
        else:
            leases = sorted(self.sched.leases.values(), key=lambda lease: lease.id)
        for lease in leases:
            vmrr = lease.last_vmrr()
            if lease.kind is LeaseKind.BEST_EFFORT or lease.state is not S.SCHEDULED or vmrr is None \
                    or vmrr.end > now:
                continue
            why = (f"its window {self.log.t(vmrr.start)} to {self.log.t(vmrr.end)} passed while the lease manager "
                   f"was down ({self.log.t(since)} to {self.log.t(now)})")
            with self._atomic(f"failing lease {lease.id}"):
                self._fail(lease, since, why)
                self.store.add_event(since, "fail", lease)
            self.log.status("RM", f"lease {lease.id} is {lease.state.value}: {why}")
            failed += 1
        return failed

    def _defer_unrun(self, t: int, before: dict[int, LeaseState], changed) -> None:
        """In mode fast, the hosts did nothing while the daemon was down: a best-effort lease that a missed step at t
        started, resumed or migrated never did. It goes back to the queue as it was (journaled, so that a replay
        agrees), and the next round books it again: at the latest, the step at now runs it for all its time."""
        for lease in changed:
            old = before.get(lease.id)
            if lease.kind is not LeaseKind.BEST_EFFORT or lease.state not in UNRUN or old in (S.ACTIVE, S.RESUMING) \
                    or lease.id not in self.sched.leases:
                continue
            with self._atomic(f"deferring lease {lease.id}"):
                self._defer(lease, t)
                self.store.add_event(t, "defer", lease)
            self.log.status("RM", f"lease {lease.id} was to be {lease_verb(old)} at {self.log.t(t)} while the lease "
                                  f"manager was down and the hosts did nothing: {lease.state.value} again, "
                                  f"{format_duration(self.clock.now() - t)} late")

    def _late(self, t: int) -> int | None:
        """How late (simulated seconds) a step at t is, when it is worth saying: more than LATE_REAL late."""
        if time.time() - self.clock.real_time(t) <= LATE_REAL:
            return None
        return self.clock.now() - t

    def _say_late(self, t: int, late: int, before: dict[int, LeaseState], changed) -> None:
        for lease in changed:
            old = before.get(lease.id)
            if old is not None and old is not lease.state:
                self.log.status("RM", f"lease {lease.id} {old.value} -> {lease.state.value} at {self.log.t(t)}, "
                                      f"{format_duration(late)} late")


def lease_verb(state: LeaseState | None) -> str:
    """What a step was to do to a lease in that state for it to begin running something."""
    if state in (S.SUSPENDED_SCHEDULED, S.SUSPENDED_QUEUED):
        return "resumed or migrated"
    if state is S.MIGRATING:
        return "resumed"
    return "started"
