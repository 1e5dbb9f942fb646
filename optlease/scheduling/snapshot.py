"""One scheduling round's input (a frozen snapshot of the site and its leases) and its output (a Plan with stats)."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any

from optlease.domain.lease import LeaseKind, LeaseRequest
from optlease.domain.site import Site


class Phase(str, Enum):
    """Where a lease stands when the round starts."""

    NEW = "new"              # requested since the last round: AR (exact start), immediate (now or never), best-effort
    QUEUED = "queued"        # best-effort, waiting, nothing planned for it
    RESERVED = "reserved"    # not started, an earlier round planned its start and mapping (kept for stability)
    RUNNING = "running"      # holding its nodes now
    SUSPENDED = "suspended"  # its memory images wait on disk; it needs a resume


class Suspension(str, Enum):
    NONE = "none"
    SERIAL_ONLY = "serial-only"
    ALL = "all"


class Migration(str, Enum):
    NO = "no"
    YES = "yes"
    YES_NOTRANSFER = "yes-notransfer"


class Exclusion(str, Enum):
    LOCAL = "local"
    GLOBAL = "global"


class Admission(str, Enum):
    ACCEPT_ALL = "accept-all"
    NO_ARS = "no-ARs"


class Preemption(str, Enum):
    NO_PREEMPTION = "no-preemption"
    AR_PREEMPTS_EVERYTHING = "ar-preempts-everything"


@dataclass(frozen=True)
class Policy:
    """Haizea's [scheduling] options that shape a round (defaults as in Haizea)."""

    suspension: Suspension = Suspension.ALL
    migration: Migration = Migration.NO
    exclusion: Exclusion = Exclusion.LOCAL
    threshold_factor: int = 1
    admission: Admission = Admission.ACCEPT_ALL
    preemption: Preemption = Preemption.NO_PREEMPTION
    non_schedulable_interval: int = 10
    suspend_for_waiting: bool = False   # a running preemptible best-effort lease may also be suspended at once so
                                        # that waiting leases run first (not only for an AR)

    def may_suspend(self, numvms: int) -> bool:
        """Whether a preemptible lease of `numvms` VMs may be suspended for an AR under these options."""
        return self.preemption is not Preemption.NO_PREEMPTION and self.suspendable(numvms)

    def suspendable(self, numvms: int) -> bool:
        """Whether `suspension` lets a lease of `numvms` VMs be suspended at all."""
        return self.suspension is Suspension.ALL or (self.suspension is Suspension.SERIAL_ONLY and numvms == 1)


@dataclass(frozen=True)
class Weights:
    """Objective weights, in units of a tenth of a second of waiting of a best-effort lease of weight 1 (`wait` units
    make one such second); each level's unit should outweigh what the next level can gain (lexicographic via
    weights). Users set `rejected` and `preemptions` in seconds of waiting (weight-rejected, weight-preemption)."""

    rejected: int = 10_000     # per node-second of an AR or immediate lease refused: 1,000 s of waiting
    wait: int = 10             # per second of best-effort completion time, times the lease's weight
    preemptions: int = 50      # per lease suspended: 5 s of waiting
    migrations: int = 20       # per VM resumed on another node: 2 s of waiting
    overhead: int = 1          # per second of suspend, resume and migration: 0.1 s of waiting
    stability_time: int = 1    # per second a planned start moves: 0.1 s of waiting
    stability_nodes: int = 1   # per VM moved off its planned node: 0.1 s of waiting
    aging: int = 3600          # every `aging` seconds of waiting add 1 to a best-effort lease's weight
    slowdown: int = 3600       # a best-effort lease's weight counts per this many seconds of its run (0: off)
    transfer: int = 10         # per second the link carries a lease's own image transfer: 1 s of waiting


@dataclass(frozen=True)
class Overheads:
    """Seconds each operation takes for the whole lease (computed by the caller from memory sizes and rates)."""

    suspend: int = 0
    resume: int = 0
    migrate: int = 0
    shutdown: int = 0


@dataclass(frozen=True, slots=True)   # (no dict per instance: a round makes thousands)
class LeaseSnapshot:
    """One lease as the round sees it. `nodes[i]` is the node of vnode i+1: where it runs (RUNNING), where its memory
    image is (SUSPENDED); `planned_*` is what an earlier round announced (RESERVED, or a SUSPENDED lease's resume)."""

    request: LeaseRequest
    phase: Phase
    overheads: Overheads = Overheads()
    nodes: tuple[int, ...] = ()
    stays: bool = False            # RUNNING, SUSPENDED: resumes only on `nodes`, each VM where its images are, whatever
                                   # the policy's `migration` (a disk image the round does not copy)
    left: int | None = None        # seconds of run still to do (None: the requested duration)
    ran: int = 0                   # seconds run so far
    since: int | None = None       # RUNNING: when it last started or resumed
    planned_start: int | None = None
    planned_nodes: tuple[int, ...] = ()
    pinned: bool = False           # RESERVED only: the round may not move it (start and nodes stay as planned)
    release: int | None = None     # not before this time (offline optimization: the lease's arrival)
    latest_start: int | None = None   # best-effort: if placed, started by this time (a caller's guard)
    allowed_nodes: tuple[int, ...] = ()   # the nodes its VMs may (re)start on (empty: every node); a caller's
                                          # neighbourhood that keeps a round small (not exact: see models/)
    expected_run: int | None = None   # best-effort: the whole run its booking expects (None: the requested
                                      # duration; less with a run-time estimate), what its wait is weighed against
    required: bool = False         # NEW AR or immediate: the round must admit it (its hint admits it, so it fits)

    @property
    def id(self) -> int:
        return self.request.id

    @property
    def kind(self) -> LeaseKind:
        return self.request.kind

    @property
    def remaining(self) -> int:
        return self.request.duration if self.left is None else self.left


@dataclass(frozen=True)
class RoundSnapshot:
    """Everything one round decides from; `now` and every time are whole seconds from the simulation epoch."""

    now: int
    site: Site
    leases: tuple[LeaseSnapshot, ...]
    policy: Policy = Policy()
    link: Any = None    # cpsat.transfers.Link under `lease-preparation: imagetransfer`; None: images not managed

    def __post_init__(self) -> None:
        ids = [lease.id for lease in self.leases]
        if len(ids) != len(set(ids)):
            raise ValueError("a round snapshot holds each lease once")
        for lease in self.leases:
            if lease.phase in (Phase.RUNNING, Phase.SUSPENDED) and len(lease.nodes) != lease.request.numnodes:
                raise ValueError(f"lease {lease.id}: {lease.phase.value} needs the node of each of its VMs")

    def lease(self, lease_id: int) -> LeaseSnapshot:
        return next(lease for lease in self.leases if lease.id == lease_id)

    @property
    def node_classes(self) -> tuple[tuple[int, ...], ...]:
        """Nodes grouped by identical capacity, in node order (the model narrows them to untouched nodes)."""
        groups: dict[tuple, list[int]] = {}
        keys: dict[tuple, tuple] = {}   # a capacity as written -> its key (made once per distinct capacity)
        types = self.site.resource_types
        for node in self.site.node_ids:
            cap = self.site.capacity(node)
            written = tuple(cap.items())
            key = keys.get(written)
            if key is None:
                key = keys[written] = tuple(sorted((t, cap.get(t, 0)) for t in types))
            group = groups.get(key)
            if group is None:
                groups[key] = [node]
            else:
                group.append(node)
        return tuple(tuple(nodes) for nodes in groups.values())


class Outcome(str, Enum):
    ACCEPTED = "accepted"    # runs, or is planned (running leases that go on are accepted too)
    REJECTED = "rejected"    # refused, with a reason
    DEFERRED = "deferred"    # best-effort that stays queued (or suspended) past the look-ahead


@dataclass(frozen=True, slots=True)   # (no dict per instance: a round makes thousands)
class LeasePlan:
    """What the round decided for one lease. `start` is when its start (or resume) begins on `nodes`: a migrated VM's
    image is copied in the migrate time just before (holding no node); the run ends at `end` and a shutdown follows."""

    lease_id: int
    outcome: Outcome
    reason: str = ""
    start: int | None = None
    nodes: tuple[int, ...] = ()
    end: int | None = None
    suspend_at: int | None = None
    migrations: tuple[tuple[int, int, int], ...] = ()   # (vnode, from node, to node)
    transfer_start: int | None = None   # when its own disk-image transfer begins (lease-preparation: imagetransfer)


@dataclass(frozen=True)
class RoundStats:
    status: str                    # OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN, ... ; "HINT" when the hint was kept
    objective: int | None
    best_bound: float | None
    gap: float | None
    wall_time: float
    num_variables: int
    num_constraints: int
    source: str = "cpsat"          # which plan was returned: cpsat, hint, mip
    hint_objective: int | None = None   # the hint's cost in the same model (the greedy plan's, in the simulator)
    capped: bool = False           # the wall-clock safety net stopped the search before its deterministic work limit
    held: int = 0                  # tails held where the hint puts them (cpsat.window): the search moved the others


@dataclass(frozen=True)
class Plan:
    leases: tuple[LeasePlan, ...]
    stats: RoundStats | None = field(default=None, compare=False)

    def of(self, lease_id: int) -> LeasePlan:
        return next(p for p in self.leases if p.lease_id == lease_id)

    @cached_property
    def by_id(self) -> dict[int, LeasePlan]:
        """Each lease's plan by its id (made once per plan: a round reads it a dozen times; nothing writes it)."""
        return {p.lease_id: p for p in self.leases}
