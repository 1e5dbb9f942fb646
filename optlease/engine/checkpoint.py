"""Checkpoints of the daemon's live state, so that a restart replays only the journal written since the last one.

Replaying a journal costs one scheduling step per journaled step: 100,000 entries took half a minute. Every
CHECKPOINT_EVERY entries the daemon writes a checkpoint and drops the entries it covers, in one transaction
(`Store.add_checkpoint`): a restart loads the checkpoint, then replays what came after it.

What a checkpoint holds is the scheduler's live half, exactly as it is in memory (its queue, its pending requests,
the leases in the system and their reservations, the slot table, the stepper's and the planner's own bookkeeping,
the requests not yet stepped): the next step after a restart then decides what it would have decided without one.
Leases that have finished are not in it: they never change again, and their rows in `leases` and `reservations`
(written when they finished) are what a restart rebuilds them from, so the checkpoint's size follows the leases in
the system, not the history.

The live half is pickled, because it is an object graph of the scheduler's own classes that no hand-written format
would follow as the scheduler changes. Loading it is restricted to those classes (`_Loader.find_class`): a
checkpoint is data, and the only objects it can make are scheduler records. A checkpoint is tied to the build
that wrote it (`fingerprint`): another build refuses it in one line instead of misreading it.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import pickle
from pathlib import Path

from optlease.domain.lease import LeaseState
from optlease.scheduling.records import MIGRATE, RESUME, VM, Lease, RR

CHECKPOINT_EVERY = 10_000     # journal entries between two checkpoints: a restart replays fewer than this
FINISHED = (LeaseState.DONE, LeaseState.CANCELLED, LeaseState.REJECTED, LeaseState.FAILED)
# The state the daemon's objects hold that comes from the configuration or the process, not from what happened:
# a restart gives them anew rather than from the checkpoint.
_SCHED_OWN = ("site", "opts", "policies", "log", "on_refusal", "finished")
# modules whose classes a checkpoint may hold (every one pure bookkeeping), and the few standard types it uses
_MODULES = ("optlease.scheduling.", "optlease.domain.")
_STANDARD = {("itertools", "count"), ("collections", "deque"), ("collections", "OrderedDict"),
             ("collections", "defaultdict"), ("builtins", "set"), ("builtins", "frozenset"),
             ("sortedcontainers.sortedlist", "SortedList"), ("sortedcontainers.sortedlist", "SortedKeyList"),
             ("sortedcontainers.sorteddict", "SortedDict"), ("sortedcontainers.sortedset", "SortedSet")}


class CheckpointError(ValueError):
    """A checkpoint that this build cannot load."""


@functools.cache
def fingerprint() -> str:
    """The build a checkpoint belongs to: a digest of the code whose objects it holds."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for folder in ("scheduling", "domain"):
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    digest.update((root / "engine" / "loop.py").read_bytes())
    return digest.hexdigest()[:16]


def dump(manager) -> bytes:
    """The manager's live half (lock held)."""
    buf = io.BytesIO()
    dump_to(manager, buf)
    return buf.getvalue()


def dump_to(manager, out) -> None:
    """The manager's live half, pickled into `out` (a file: a forked child writes it there, engine.checkpoint_fork;
    else the lock is held)."""
    sched, stepper = manager.sched, manager.stepper
    given = _given(manager)
    finished = {lease.id for lease in manager.all.values() if lease.state in FINISHED}
    state = {
        "sched": {k: v for k, v in vars(sched).items() if k not in _SCHED_OWN},
        "stepper": {k: v for k, v in vars(stepper).items() if k not in ("sched", "planner") and not callable(v)},
        "planner": {k: v for k, v in vars(stepper.planner).items() if k != "sched" and not callable(v)},
        "inbox": manager.inbox,
        "live": [lease for lease in manager.all.values() if lease.id not in finished],
        "last_t": manager.last_t,
    }
    _Dumper(out, given, finished).dump(state)


def load(manager, body: bytes, ids: list[int], finished_lease) -> None:
    """Put a checkpoint's live half into a fresh manager. Every lease of `ids` (the requests the checkpoint came
    after, in order) that is not in it had finished by then: `finished_lease(id)` rebuilds it from its rows."""
    try:
        state = _Loader(io.BytesIO(body), _given(manager), finished_lease).load()
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the bytes are, the answer is one line
        raise CheckpointError(f"it does not load ({type(exc).__name__}: {exc})") from None
    live = {lease.id: lease for lease in state["live"]}
    manager.all = {i: live[i] if i in live else finished_lease(i) for i in ids}
    sched, stepper = manager.sched, manager.stepper
    vars(sched).update(state["sched"])
    sched.finished = []
    if sched.table.changed is None:
        sched.table.changed = set()
    vars(stepper).update(state["stepper"])
    vars(stepper.planner).update(state["planner"])
    manager.inbox = state["inbox"]
    manager.last_t = state["last_t"]


def _given(manager) -> dict:
    """The objects a restart gives anew, by name."""
    sched = manager.sched
    return {"site": sched.site, "opts": sched.opts, "policies": sched.policies, "log": sched.log}


class _Dumper(pickle.Pickler):
    def __init__(self, out, given: dict, finished: set[int]) -> None:
        super().__init__(out, protocol=pickle.HIGHEST_PROTOCOL)
        self.given = {id(obj): name for name, obj in given.items()}
        self.finished = finished

    def persistent_id(self, obj):
        name = self.given.get(id(obj))
        if name is not None:
            return name
        if type(obj) is Lease and obj.id in self.finished:
            return ("lease", obj.id)      # rebuilt from its rows: reservations still in the slot table point to it
        return None


class _Loader(pickle.Unpickler):
    def __init__(self, src, given: dict, finished_lease) -> None:
        super().__init__(src)
        self.given = given
        self.finished_lease = finished_lease

    def persistent_load(self, pid):
        if isinstance(pid, tuple) and len(pid) == 2 and pid[0] == "lease" and isinstance(pid[1], int):
            return self.finished_lease(pid[1])
        if isinstance(pid, str) and pid in self.given:
            return self.given[pid]
        raise CheckpointError(f"it refers to {str(pid)[:40]}, which this journal does not have")

    def find_class(self, module: str, name: str):
        if (module, name) in _STANDARD or module.startswith(_MODULES):
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise CheckpointError(f"it holds {module}.{name}, which no checkpoint holds")


@functools.lru_cache(maxsize=4096)
def _mapping(text: str) -> tuple:
    """A reservation row's mapping (few distinct texts: read each once)."""
    return tuple((int(v), p) for v, p in json.loads(text).items())


def finished_lease(req, demands: dict, row: tuple, reservations: list[tuple]) -> Lease:
    """A finished lease as its rows recorded it: state, progress, times, reason, and its reservations (each VM
    reservation with the migrations and resumes before it and the suspension or shutdown after it)."""
    kind, state, accumulated, first_start, end, reason = row
    lease = Lease(req, demands, LeaseState(state), accumulated, first_start=first_start, end=end, reason=reason)
    before: list[RR] = []
    for n, rkind, start, rend, rstate, mapping in reservations:
        placed = dict(_mapping(mapping))
        demand: dict[int, tuple] = {}
        for v, p in placed.items():
            d = demands.get(v)
            if d is not None:
                demand[p] = d if p not in demand else tuple(x + y for x, y in zip(demand[p], d))
        rr = RR(lease, rkind, start, rend, placed, demand, n)
        rr.state = rstate
        if rkind in (MIGRATE, RESUME):
            before.append(rr)
        elif rkind == VM:
            rr.pre, before = before, []
            for pre in rr.pre:
                pre.vm = rr
            lease.vmrrs.append(rr)
        elif lease.vmrrs:
            rr.vm = lease.vmrrs[-1]
            lease.vmrrs[-1].post.append(rr)
    return lease
