"""Requests on their way in: what `create_lease` waits for, and only that.

A request is parsed before any lock is taken, staged under a small intake lock, and committed by group commit: the
requests that arrive while one batch is being written go to disk together in the next transaction, one fsync for
the batch. With greedy rounds, once the loop runs, the batch is committed in the transaction of the step that takes
it (stepped at once by the writer when the scheduler is free, else by the loop's next step), so a request costs one
fsync and one step. With CP-SAT rounds the batch is written on its own, without the manager's lock, so a client
never waits for a round. A request is in no answer before it is committed.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import replace

from optlease.engine.atomic import Stopped
from optlease.engine.persist import StoreError


class Intake:
    """The intake half of the Manager (a mixin: it needs the Manager's lock, clock, store, views, `_new_lease`,
    and the intake fields its constructor sets: `_intake`, `_staged`, `next_id`, `_last_id`, `_commits`,
    `_committing`, `_committed`, `inbox`)."""

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
            (lease_id,) = self._take_ids(1)
            if arrival < self.last_t:       # a step ran meanwhile: the request arrives after it
                req = make_request(lease_id, self.now())
            else:
                req = replace(req, id=lease_id)
            self._staged.append((req, xml))
            self.submitted_at[req.id] = time.time()
        self._commit_staged(req.id)
        return req.id

    def reserve_ids(self, count: int) -> range:
        """`count` lease ids that no request will be given (for requests that reach a step without `submit`)."""
        with self._intake:
            return self._take_ids(count)

    def _take_ids(self, count: int) -> range:
        """The next `count` ids (the caller holds the intake lock)."""
        first = self.next_id
        self.next_id += count
        return range(first, first + count)

    def _commit_staged(self, upto: int) -> None:
        """Return once the request `upto` is committed. The first caller to find no batch under way writes every
        request staged so far (the commit turn); the others wait for it and go in the next batch if theirs missed
        this one.

        With greedy rounds, once the loop runs (`_fold_steps`), a batch is committed in the transaction of the step
        that takes it: the writer steps it at once when the scheduler is free (`_step_with`), else hands it to the
        loop, whose next step takes every staged request (`_take_turn`). A request then costs one fsync and one
        step, and its client is answered once both are on disk. With CP-SAT rounds, which last up to their time
        limit, a batch is committed on its own and the loop steps it later: a client never waits for a round."""
        while True:
            with self._commits:
                while self._committed < upto:
                    if self.lock.refused is not None:   # the batch it was in failed
                        raise Stopped(f"the lease manager has stopped: {self.lock.refused}")
                    if self._loop_takes and not self._loop_alive():
                        self._loop_takes = False        # the loop stopped before it took the batch
                    if not self._committing and not self._loop_takes:
                        self._committing = True
                        break
                    self._commits.wait(1.0)
                else:
                    return
            self._write_batch()

    def _write_batch(self) -> None:
        """Write (or step, or hand to the loop) every staged request; the caller holds the commit turn."""
        top, failed, handed = 0, None, False
        try:
            # The batch is written without the intake lock: requests keep being staged, and a step takes what was
            # committed before, while the disk syncs. No step sees the batch before it is on disk.
            with self._intake:
                reqs, self._staged = self._staged, []
            if not reqs:
                return
            if self._fold_steps:
                if self.lock.raw.acquire(blocking=False):
                    try:
                        if self._step_with(reqs):
                            top = reqs[-1][0].id
                            return
                    finally:
                        self.lock.raw.release()
                # a step, a cancellation or an enactment pass holds the scheduler, or an earlier instant is due:
                # the loop's next step takes the batch (it never waits on this thread, which never blocks on it)
                with self._intake:
                    self._staged[:0] = reqs
                handed = True
                self.wake.set()
                return
            try:
                self.store.add_requests(reqs)
            except StoreError as exc:
                failed = f"storing requests {reqs[0][0].id} to {reqs[-1][0].id}: {exc}"
            else:
                top = reqs[-1][0].id
                leases = [self._new_lease(req) for req, _ in reqs]
                self.views.publish_new(leases)      # committed, and no step can see them yet
                with self._intake:
                    self.inbox.extend(leases)
                    self._last_id = max(self._last_id, top)
                self.wake.set()         # the loop steps them
            if failed is not None:
                self._die(failed)       # after the intake lock is given back: _die waits for the manager's
        except BaseException:
            top = 0
            raise
        finally:
            self._give_turn(top, handed)

    def _give_turn(self, top: int, handed: bool = False) -> None:
        """The commit turn given back: every request up to `top` is on disk; `handed`: the loop takes the staged
        ones."""
        with self._commits:
            self._committing = False
            self._loop_takes = handed
            self._committed = max(self._committed, top)
            self._commits.notify_all()

    def _take_turn(self) -> list[tuple]:
        """The loop's step takes the commit turn and every staged request (manager's lock held: the batch writer
        never waits for that lock, so this wait is short)."""
        with self._commits:
            while self._committing:
                self._commits.wait()
            self._committing = True
        with self._intake:
            reqs, self._staged = self._staged, []
        return reqs

    def _loop_alive(self) -> bool:
        thread = getattr(self, "_thread", None)
        return thread is not None and thread.is_alive() and not self.stopping.is_set()

    def _step_with(self, reqs: list[tuple]) -> bool:
        """Step the batch at once, its requests and the step in one transaction (manager's lock and commit turn
        held); False when an earlier instant is due, which the loop steps first (the clock never skips one)."""
        if self.lock.refused is not None:
            raise Stopped(f"the lease manager has stopped: {self.lock.refused}")
        t = self.now()
        due = self.next_instant()
        if due is not None and due < t:
            return False
        self.step(t, requests=reqs)
        due = self.next_instant()
        if due is not None and due < self._sleeping_to:
            self.wake.set()     # the step planned something before the instant the loop sleeps until
        return True

    def _admit(self, reqs: list[tuple]) -> list:
        """The batch's leases, queued for the step under way to take (manager's lock held, commit turn held)."""
        leases = [self._new_lease(req) for req, _ in reqs]
        with self._intake:
            self.inbox.extend(leases)
            self._last_id = max(self._last_id, reqs[-1][0].id)
        return leases

    @contextmanager
    def _no_batch(self):
        """No batch of requests on its way to disk, and none starting, while the caller runs (a checkpoint must hold
        every committed request)."""
        with self._commits:
            while self._committing:
                self._commits.wait()
            self._committing = True
        try:
            yield
        finally:
            with self._commits:
                self._committing = False
                self._commits.notify_all()
