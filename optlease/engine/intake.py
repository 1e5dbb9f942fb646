"""Requests on their way in: what `create_lease` waits for, and only that.

A request is parsed before any lock is taken, staged under a small intake lock (never the manager's, so it never
waits for a scheduling round or enactment), and committed by group commit: the requests that arrive while one batch
is being written go to disk together in the next transaction, one fsync for the batch. The batch is written without
the intake lock, so requests keep being staged and a step starts while the disk syncs. A request is in no step and
no answer before its batch is committed.
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
