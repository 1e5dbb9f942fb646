"""Checkpoints of the live daemon: written by a forked child while the daemon serves, committed when it is done.

The half of the Manager that decides when a checkpoint is due, forks the child that writes it
(engine.checkpoint_fork), and commits what the child wrote with the journal position its image covers
(Store.stage_checkpoint, Store.add_checkpoint). The enactment thread collects the child (its 0.1 s poll); before
the loop runs, the next step does. `forked_checkpoints=False` pickles in the daemon's turn, as before.
"""
from __future__ import annotations

import os
import time
from contextlib import nullcontext

from optlease.engine import checkpoint, checkpoint_fork
from optlease.engine import persist
from optlease.engine.persist import StoreError


class Checkpointing:
    """The checkpoint half of the Manager (a mixin: it needs the Manager's store, lock, intake locks, log, and the
    attributes `forked_checkpoints`, `_child`, `_collecting`, `_checkpoint_retry`, `checkpoint_stats`)."""

    def checkpoint_due(self) -> bool:
        """Whether the journal has grown enough since the last checkpoint (or failed try) for another."""
        return bool(self.store.path) and self._child is None \
            and self.store.entries >= max(checkpoint.CHECKPOINT_EVERY, self._checkpoint_retry)

    def write_checkpoint(self, holding_turn: bool = False, wait: bool = False) -> None:
        """Write a checkpoint of the live state and drop the journal entries it covers (lock held; `holding_turn`:
        the caller is the batch writer, so no other batch is on its way). Forked, a child writes it from an image
        of the state as it is now while the daemon goes on, and `collect_checkpoint` commits it once the child is
        done (`wait`: at once, after the child already writing, if any). One at a time: without `wait`, while a
        child writes, this does nothing."""
        if self._child is not None:
            if not wait:
                return
            self.collect_checkpoint(wait=True)
        began, cpu, at = time.perf_counter(), time.process_time(), time.time()
        with nullcontext() if holding_turn else self._no_batch(), self._intake:   # it holds every committed request
            seq = self.store.last_seq()
            if seq is None:
                return
            if self.forked_checkpoints and self.store.path:      # (in memory: nothing to fork for)
                folder = os.path.dirname(os.path.abspath(self.store.path))
                self._child = checkpoint_fork.fork(self, folder, seq, self._last_id)
            else:
                body = checkpoint.dump(self)
                dropped = self.store.add_checkpoint(seq, self._last_id, checkpoint.fingerprint(), body)
        if self._child is not None:
            self.checkpoint_stats = {"began_at": at, "fork_ms": round(1000 * self._child.fork_s, 2),
                                     "fork_cpu_ms": round(1000 * (time.process_time() - cpu), 2)}
            if wait:
                self.collect_checkpoint(wait=True)
            return
        self.checkpoint_stats = {"began_at": at, "ended_at": time.time(),
                                 "inline_s": round(time.perf_counter() - began, 3),
                                 "inline_cpu_s": round(time.process_time() - cpu, 3), "bytes": len(body)}
        self.log.status("RM", f"checkpoint of {len(self.sched.leases) + len(self.inbox)} leases in the system "
                              f"({len(body) // 1024} KiB) replaces {dropped} journal entries, in "
                              f"{time.perf_counter() - began:.2f} s")

    def collect_checkpoint(self, wait: bool = False) -> bool:
        """Commit the checkpoint a child wrote, once it has exited: its bytes in parts, then, in one transaction,
        the checkpoint with the journal position its image covers and the entries up to there dropped. A child
        that failed, or a file that is not what it wrote, is said in one line and leaves the journal as it was; the
        next try comes a tenth of CHECKPOINT_EVERY entries later. Whether no child is left (`wait`: block until
        it has exited)."""
        done, line = self._collect_child(wait)
        if line:
            with self.lock.raw:       # taken after `_collecting` is given back: never the other way round
                self.log.status("RM", line)
        return done

    def _collect_child(self, wait: bool) -> tuple[bool, str | None]:
        if not self._collecting.acquire(blocking=wait):
            return False, None
        try:
            child = self._child
            if child is None:
                return True, None
            done = checkpoint_fork.exited(child, wait)
            if done is None:
                return False, None
            status, child_cpu = done
            began, cpu = time.perf_counter(), time.process_time()
            try:
                size, parts = checkpoint_fork.sealed_parts(child, status, persist.PART)
                longest = self.store.stage_checkpoint(child.seq, parts)
                swap = time.perf_counter()
                dropped = self.store.add_checkpoint(child.seq, child.last_id, checkpoint.fingerprint())
                swap = time.perf_counter() - swap
                # the previous checkpoint's parts, now that no row names them
                longest = max(longest, swap, self.store.drop_stale_parts())
            except (checkpoint.CheckpointError, StoreError) as exc:
                self._checkpoint_retry = self.store.entries + checkpoint.CHECKPOINT_EVERY // 10
                line = (f"checkpoint at journal entry {child.seq} abandoned: {exc}; the journal stays as it was, "
                        f"the next try after {checkpoint.CHECKPOINT_EVERY // 10} more entries")
            else:
                self._checkpoint_retry = 0
                commit = time.perf_counter() - began
                self.checkpoint_stats.update(child_cpu_s=round(child_cpu, 3), commit_ms=round(1000 * commit, 2),
                                             commit_cpu_ms=round(1000 * (time.process_time() - cpu), 2),
                                             bytes=size, ended_at=time.time(),
                                             longest_transaction_ms=round(1000 * longest, 2),
                                             swap_ms=round(1000 * swap, 2))
                line = (f"checkpoint of {child.leases} leases in the system ({size // 1024} KiB) replaces "
                        f"{dropped} journal entries: written by a child in {child_cpu:.2f} s of its CPU, the "
                        f"daemon paused {1000 * child.fork_s:.0f} ms to fork it and took {commit:.2f} s to commit it")
            finally:
                checkpoint_fork.release(child)
                self._child = None
            return True, line
        finally:
            self._collecting.release()
