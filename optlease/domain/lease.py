"""Leases as users request them, and the states a lease moves through (Haizea's declarative state table)."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


# The most VMs one lease (or one node-set of a site) may have: a bound on what a trace line can make optlease build.
MAX_VMS = 100_000


def check_vm_count(count: int) -> str | None:
    """None when a number of VMs or nodes is acceptable, else why not."""
    if count > MAX_VMS:
        return f"{count} nodes is more than optlease accepts in one lease or node-set ({MAX_VMS})"
    return None


class LeaseKind(str, Enum):
    AR = "ar"
    BEST_EFFORT = "best-effort"
    IMMEDIATE = "immediate"

    @property
    def label(self) -> str:
        """Haizea's short name, as its logs and summaries print it."""
        return {"ar": "AR", "best-effort": "Best-effort", "immediate": "Immediate"}[self.value]


class LeaseState(str, Enum):
    NEW = "new"
    PENDING = "pending"
    REJECTED = "rejected"
    QUEUED = "queued"
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    SUSPENDING = "suspending"
    SUSPENDED_PENDING = "suspended-pending"
    SUSPENDED_QUEUED = "suspended-queued"
    SUSPENDED_SCHEDULED = "suspended-scheduled"
    MIGRATING = "migrating"
    RESUMING = "resuming"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


S = LeaseState
# Every legal move of a lease, in one place: the engine refuses anything else (a bug, never a user error).
TRANSITIONS: dict[LeaseState, frozenset[LeaseState]] = {
    S.NEW: frozenset({S.PENDING, S.REJECTED}),
    S.PENDING: frozenset({S.QUEUED, S.SCHEDULED, S.REJECTED, S.CANCELLED}),
    S.QUEUED: frozenset({S.SCHEDULED, S.CANCELLED, S.REJECTED}),
    S.SCHEDULED: frozenset({S.ACTIVE, S.QUEUED, S.PENDING, S.CANCELLED, S.FAILED}),
    S.ACTIVE: frozenset({S.SUSPENDING, S.DONE, S.QUEUED, S.CANCELLED, S.FAILED}),
    S.SUSPENDING: frozenset({S.SUSPENDED_PENDING, S.CANCELLED, S.FAILED}),
    S.SUSPENDED_PENDING: frozenset({S.SUSPENDED_QUEUED, S.SUSPENDED_SCHEDULED, S.CANCELLED}),
    S.SUSPENDED_QUEUED: frozenset({S.SUSPENDED_SCHEDULED, S.CANCELLED}),
    S.SUSPENDED_SCHEDULED: frozenset({S.MIGRATING, S.RESUMING, S.SUSPENDED_QUEUED, S.SUSPENDED_PENDING,
                                      S.CANCELLED, S.FAILED}),
    S.MIGRATING: frozenset({S.SUSPENDED_SCHEDULED, S.RESUMING, S.CANCELLED, S.FAILED}),
    S.RESUMING: frozenset({S.ACTIVE, S.SUSPENDED_QUEUED, S.CANCELLED, S.FAILED}),
    S.DONE: frozenset(),
    S.REJECTED: frozenset(),
    S.CANCELLED: frozenset(),
    S.FAILED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A lease was asked to move where the state table does not allow: a bug in optlease."""


def check_transition(lease_id: int, old: LeaseState, new: LeaseState) -> None:
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(f"lease {lease_id}: {old.value} -> {new.value} is not a legal transition")


@dataclass(frozen=True)
class DiskImage:
    id: str
    size: int  # MB


@dataclass(frozen=True)
class LeaseRequest:
    """One lease as requested. Times are whole seconds from the start of the workload (the simulation epoch).

    `vms[i]` is the demand of vnode i+1 (resource type -> amount). `start` is the exact start of an AR and None
    otherwise; `real_duration` is how long the lease really runs (a trace's <realduration>), None = its duration.
    """

    id: int
    kind: LeaseKind
    arrival: int
    duration: int
    vms: tuple[dict[str, int], ...]
    preemptible: bool = False
    start: int | None = None
    real_duration: int | None = None
    software: DiskImage | None = None
    deadline: int | None = None
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def numnodes(self) -> int:
        return len(self.vms)

    @property
    def actual_duration(self) -> int:
        return self.duration if self.real_duration is None else min(self.real_duration, self.duration)

    def memory_of(self, vnode: int) -> int:
        return self.vms[vnode - 1].get("Memory", 0)

    def alike(self) -> dict[str, int] | None:
        """The one demand every VM asks, None when they differ (or there are none): one comparison per VM, made in
        C (the readers give VMs alike as one dict, so most are the same object)."""
        return alike_vm(self.vms)


def alike_vm(vms) -> dict[str, int] | None:
    """The one demand every VM of `vms` asks, None when they differ (or there are none)."""
    if not vms:
        return None
    first = vms[0]
    return first if vms.count(first) == len(vms) else None
