"""Turn a round snapshot into the jobs both round models share: roles, windows, candidate nodes, node classes."""
from __future__ import annotations

from collections import Counter
from dataclasses import MISSING, dataclass, fields
from enum import Enum
from functools import cached_property
from operator import lt
from typing import Any

from optlease.domain.lease import LeaseKind, LeaseRequest
from optlease.scheduling.snapshot import Admission, Exclusion, LeaseSnapshot, Migration, Phase, RoundSnapshot, \
    Weights


class Role(str, Enum):
    FIXED = "fixed"              # running and not interruptible: constant occupancy until it ends
    SUSPENDABLE = "suspendable"  # running, may be suspended (for an AR, or at once for waiting leases), then resumed
    START = "start"              # needs a start or a resume somewhere in the look-ahead
    REJECTED = "rejected"        # refused before modelling (admission policy, too late, too large)


@dataclass(frozen=True)
class Job:
    """One lease as the models see it. The *tail* is the start (or resume) to place; its run takes `remaining`
    seconds (a SUSPENDABLE lease suspended to end at `a` has `remaining - (a - suspend - now)` left)."""

    id: int
    kind: LeaseKind
    role: Role
    demand: tuple[dict[str, int], ...]
    reason: str = ""
    optional: bool = False            # a new AR or immediate lease: accepting it is a decision
    deferrable: bool = False          # best-effort: may stay queued past the look-ahead
    earliest: int = 0                 # first time the tail's start (or its migration) may begin
    latest: int | None = None         # best-effort: last time the tail may start, if it is placed
    fixed_start: int | None = None    # AR start, immediate start
    remaining: int = 0
    resume: int = 0                   # resume time before the run (0 for a first start)
    migrate: int = 0                  # transfer time of a VM resumed off its origin node
    suspend: int = 0
    shutdown: int = 0
    origin: tuple[int, ...] = ()      # node of each VM's image (SUSPENDABLE, suspended); () for a first start
    stays: bool = False               # each VM resumes on its origin only, whatever the policy's `migration`
    candidates: tuple[tuple[int, ...], ...] = ()   # per VM, the nodes it may (re)start on
    suspend_ends: tuple[int, ...] = ()             # SUSPENDABLE: the times a suspension may end at
    free_end: int | None = None       # SUSPENDABLE: the one of them that needs no AR (a suspension begun at once)
    weight: int = 0                   # best-effort aging weight
    value: int = 0                    # node-seconds at stake (optional jobs)
    planned_start: int | None = None
    planned_nodes: tuple[int, ...] = ()
    allowed: tuple[int, ...] = ()     # the snapshot's neighbourhood of nodes (empty: every node)
    per_vm: bool = False              # the model places each VM, never counts them (the MIP's way; tests compare)

    def __post_init__(self) -> None:
        # whether it has a tail to place: asked of every job by every step (a plain attribute, set from its role)
        object.__setattr__(self, "has_tail", self.role in TAIL_ROLES)

    @staticmethod
    def of(**fields) -> Job:
        """`Job(**fields)` without the frozen class's `__init__`, which sets each of its 26 fields with a call of its
        own: prepare builds a job per lease of the round (7,000 at 5,000 nodes), most with a handful of fields."""
        if not FIELDS.issuperset(fields) or not REQUIRED.issubset(fields):
            return Job(**fields)   # (its TypeError names the field)
        new = object.__new__(Job)
        state = new.__dict__
        state.update(DEFAULTS)
        state.update(fields)
        state["has_tail"] = state["role"] in TAIL_ROLES
        return new

    def evolve(self, **changes) -> Job:
        """This job with `changes`: `dataclasses.replace` without its walk over every field and `__init__` (a round
        of 7,000 jobs made thousands of copies), the properties cached on this one left behind."""
        if not FIELDS.issuperset(changes):
            raise TypeError(f"Job has no field {sorted(set(changes) - FIELDS)[0]!r}")
        new = object.__new__(Job)
        state = new.__dict__
        state.update(self.__dict__)
        for name in CACHED:
            state.pop(name, None)
        state.update(changes)
        state["has_tail"] = state["role"] in TAIL_ROLES
        return new

    @property
    def numvms(self) -> int:
        return len(self.demand)

    @property
    def best_effort(self) -> bool:
        return self.kind is LeaseKind.BEST_EFFORT

    @cached_property
    def pooled(self) -> bool:
        """Identical VMs with the same candidate nodes: the CP-SAT model counts them per node instead of placing
        each one (the same plans, without their mirror images). A resume is counted too, its VMs kept on their
        images' nodes as far as the counts allow (a migration is a VM more on a node than its images there), unless
        an earlier round planned its VMs elsewhere than their images: then which VM goes where is a decision."""
        return (self.numvms > 1 and bool(self.candidates) and not self.per_vm
                and all(d == self.demand[0] for d in self.demand)
                and all(c is self.candidates[0] or c == self.candidates[0] for c in self.candidates)
                and (not self.origin or not self.planned_nodes
                     or tuple(self.planned_nodes[:self.numvms]) == tuple(self.origin)))

    @cached_property
    def images_on(self) -> Counter:
        """Per node, how many of its VMs' images are there (asked per candidate node of a counted resume)."""
        return Counter(self.origin)

    def per_node(self, capacity: dict[str, int]) -> int:
        """How many of this lease's VMs (the first one's demand) a node of this capacity holds at once."""
        fit = min((capacity.get(r, 0) // d for r, d in self.demand[0].items() if d > 0), default=self.numvms)
        return max(0, min(self.numvms, fit))

    def rem_after(self, suspend_end: int, now: int) -> int:
        """Run left after a suspension that ends at `suspend_end`."""
        return self.remaining - (suspend_end - self.suspend - now)

    def migration_time(self, vm: int, node: int) -> int:
        """Transfer time before VM `vm` (0-based) can resume on `node`."""
        return self.migrate if self.origin and node != self.origin[vm] else 0


# the roles with a tail (the start or resume to place)
TAIL_ROLES = (Role.START, Role.SUSPENDABLE)
FIELDS = frozenset(f.name for f in fields(Job))
REQUIRED = frozenset(f.name for f in fields(Job) if f.default is MISSING)
DEFAULTS = {f.name: f.default for f in fields(Job) if f.default is not MISSING}   # (none has a default factory)
CACHED = tuple(name for name, value in vars(Job).items() if isinstance(value, cached_property))


@dataclass(frozen=True)
class RoundData:
    now: int
    horizon: int                                   # last time a tail may start; deferral = a virtual start after it
    jobs: tuple[Job, ...]
    nodes: tuple[int, ...]
    capacity: dict[int, dict[str, int]]
    resource_types: tuple[str, ...]
    exclusion_global: bool
    interchangeable: tuple[tuple[int, ...], ...]   # classes of identical untouched nodes, each cut to what can be used
    weights: Weights
    link: Any = None   # cpsat.transfers.Link: the repository's link and the leases' images (None: not managed)

    @cached_property
    def tails(self) -> tuple[Job, ...]:
        """The jobs with a tail (asked by every constraint group: found once per round data)."""
        return tuple(j for j in self.jobs if j.has_tail)

    def job(self, lease_id: int) -> Job:
        return next(j for j in self.jobs if j.id == lease_id)


def _fits(demand: dict[str, int], capacity: dict[str, int]) -> bool:
    return all(amount <= capacity.get(rtype, 0) for rtype, amount in demand.items())


def prepare(snap: RoundSnapshot, weights: Weights = Weights(), lookahead: int | None = None) -> RoundData:
    """Classify every lease and bound the look-ahead; pure, and shared by the CP-SAT and the MIP round models."""
    now, policy, site = snap.now, snap.policy, snap.site
    soonest = now + policy.non_schedulable_interval
    capacity = _capacities(site)
    # the times a suspension may end at: the start of an AR that is planned, or new and admissible
    ar_starts = sorted({l.request.start for l in snap.leases
                        if l.kind is LeaseKind.AR and l.request.start is not None and l.request.start > now
                        and (l.phase is Phase.RESERVED or (l.phase is Phase.NEW and l.request.start >= soonest
                                                            and policy.admission is Admission.ACCEPT_ALL))})
    kinds = tuple({id(cap): cap for cap in capacity.values()}.values())   # the distinct capacities
    jobs = [_running_job(snap, lease, ar_starts, weights) if lease.phase is Phase.RUNNING
            else _waiting_job(snap, lease, kinds, weights) for lease in snap.leases]
    # leases released later (offline optimization) push the automatic look-ahead back by the last release
    released = max((l.release - now for l in snap.leases if l.release is not None and l.release > now), default=0)
    horizon = now + (lookahead if lookahead is not None else _auto_lookahead(now, jobs) + released
                     + (snap.link.seconds(now) if snap.link is not None else 0))
    classes, dropped = _interchangeable(snap, jobs)
    cache: dict = {}
    jobs = [_with_candidates(j, capacity, dropped, policy.migration, cache) if j.has_tail else j for j in jobs]
    # a tail that cannot be placed anywhere is refused now (or left running) rather than left for the solver to find
    jobs = [j if not j.has_tail or all(j.candidates) else
            j.evolve(role=Role.REJECTED, reason="no node can hold one of its VMs") if j.role is Role.START else
            j.evolve(role=Role.FIXED) for j in jobs]
    return RoundData(now=now, horizon=horizon, jobs=tuple(jobs), nodes=tuple(site.node_ids), capacity=capacity,
                     resource_types=site.resource_types, exclusion_global=policy.exclusion is Exclusion.GLOBAL,
                     interchangeable=classes, weights=weights, link=snap.link)


def _capacities(site) -> dict[int, dict[str, int]]:
    """Per node, its capacity: a copy of the site's, one per distinct capacity (nothing writes them; a site of
    5,000 alike nodes has one, for every step to read and the collector not to walk 5,000)."""
    copies: dict[tuple, dict[str, int]] = {}
    out = {}
    for n in site.node_ids:
        cap = site.capacity(n)
        key = tuple(cap.items())
        got = copies.get(key)
        if got is None:
            got = copies[key] = dict(cap)
        out[n] = got
    return out


def _common(lease: LeaseSnapshot) -> dict:
    # the request's own VM demands (nothing changes them; copying them cost a 140-VM lease 140 dicts per round)
    return dict(id=lease.id, kind=lease.kind, demand=tuple(lease.request.vms),
                remaining=lease.remaining, shutdown=lease.overheads.shutdown, suspend=lease.overheads.suspend,
                allowed=lease.allowed_nodes, stays=lease.stays)


def _running_job(snap: RoundSnapshot, lease: LeaseSnapshot, ar_starts: list[int], weights: Weights) -> Job:
    """FIXED, or SUSPENDABLE where policy, preemptibility and the scheduling threshold leave a suspension end: an
    AR's start, or (`suspend_for_waiting`) the end of a suspension begun as soon as the round may act."""
    now, policy, req, ov = snap.now, snap.policy, lease.request, lease.overheads
    ends: tuple[int, ...] = ()
    free = None
    if req.preemptible and lease.kind is LeaseKind.BEST_EFFORT and policy.suspendable(req.numnodes):
        since = lease.since if lease.since is not None else now - lease.ran
        soonest = max(now + policy.non_schedulable_interval, since + policy.threshold_factor * (ov.suspend + ov.resume))
        candidates = [*ar_starts] if policy.may_suspend(req.numnodes) else []
        if policy.suspend_for_waiting and soonest == now + policy.non_schedulable_interval:
            free = soonest + ov.suspend
            candidates.append(free)
        ends = tuple(sorted({a for a in candidates if soonest <= a - ov.suspend < now + lease.remaining}))
        free = free if free in ends else None
    if not ends:
        return Job.of(role=Role.FIXED, origin=lease.nodes, **_common(lease))
    return Job.of(role=Role.SUSPENDABLE, origin=lease.nodes, suspend_ends=ends, free_end=free, deferrable=True,
                  earliest=min(ends),
                  resume=ov.resume, migrate=_migrate(policy.migration, ov.migrate),
                  weight=wait_weight(now, req, weights, lease.expected_run), **_common(lease))


def _waiting_job(snap: RoundSnapshot, lease: LeaseSnapshot, kinds: tuple[dict[str, int], ...],
                 weights: Weights) -> Job:
    """START (a first start or a resume), or REJECTED with the reason."""
    now, policy, req = snap.now, snap.policy, lease.request
    if lease.pinned:   # an occupancy the round may not move: its start and nodes stay as planned
        if lease.phase is not Phase.RESERVED or lease.planned_start is None or lease.planned_start < now \
                or len(lease.planned_nodes) != req.numnodes:
            raise ValueError(f"lease {lease.id}: a pinned lease is reserved, with a start not before now and nodes")
        return Job.of(role=Role.START, fixed_start=lease.planned_start, earliest=lease.planned_start,
                      planned_start=lease.planned_start, planned_nodes=lease.planned_nodes,
                      candidates=tuple((n,) for n in lease.planned_nodes), **_common(lease))
    soonest = now + policy.non_schedulable_interval
    if lease.phase is Phase.NEW and lease.kind is LeaseKind.AR:
        if policy.admission is Admission.NO_ARS:
            return Job.of(role=Role.REJECTED, reason="admission policy no-ARs refuses advance reservations",
                          **_common(lease))
        if req.start is None or req.start < soonest:
            return Job.of(role=Role.REJECTED, reason="its start has passed or is too soon to schedule",
                          **_common(lease))
    one = req.alike()   # VMs that all ask alike are checked once (each distinct capacity once)
    if not all(any(_fits(vm, cap) for cap in kinds) for vm in ((one,) if one is not None else req.vms)):
        return Job.of(role=Role.REJECTED, reason="a VM is larger than every node", **_common(lease))
    if lease.kind is LeaseKind.AR:
        if req.start is None or req.start < now:
            raise ValueError(f"lease {lease.id}: an AR still to start needs a start not before now")
        timing = dict(fixed_start=req.start, earliest=req.start, optional=lease.phase is Phase.NEW and not lease.required)
    elif lease.kind is LeaseKind.IMMEDIATE:
        if lease.phase is not Phase.NEW:
            raise ValueError(f"lease {lease.id}: an immediate lease is new or running, not {lease.phase.value}")
        at = max(soonest, lease.release) if lease.release is not None else soonest
        timing = dict(fixed_start=at, earliest=at, optional=not lease.required)
    else:
        earliest = soonest if lease.release is None else max(soonest, lease.release)
        if lease.planned_start is not None:   # announced earlier: it may keep a start inside the interval
            earliest = max(now, min(soonest, lease.planned_start))
        latest = max(lease.latest_start, earliest) if lease.latest_start is not None else None
        # the head's guard bounds its start: left queued, it would start after the look-ahead, later than the bound,
        # so a guarded lease is placed (the hint places it within the bound); a round that could defer it to place
        # younger leases sooner, and then commits only what starts now, could leave nothing booked
        timing = dict(earliest=earliest, deferrable=latest is None, latest=latest,
                      weight=wait_weight(now, req, weights, lease.expected_run))
    suspended = lease.phase is Phase.SUSPENDED
    return Job.of(role=Role.START, origin=lease.nodes if suspended else (),
                  resume=lease.overheads.resume if suspended else 0,
                  migrate=_migrate(policy.migration, lease.overheads.migrate) if suspended else 0,
                  value=req.numnodes * req.duration if lease.kind is not LeaseKind.BEST_EFFORT else 0,
                  planned_start=lease.planned_start, planned_nodes=lease.planned_nodes, **timing, **_common(lease))


def _migrate(migration: Migration, seconds: int) -> int:
    return 0 if migration is Migration.YES_NOTRANSFER else seconds


SLOWDOWN_BOUND = 10   # seconds, the bounded slowdown's bound: shorter runs weigh as much as this long a run


def wait_weight(now: int, req: LeaseRequest, weights: Weights, run: int | None = None) -> int:
    """A best-effort lease's weight in the wait level: 1, plus 1 for every `aging` seconds waited, so that nothing
    starves; with `slowdown`, times `slowdown` over its run (at least SLOWDOWN_BOUND seconds; the weight at least 1),
    so that a second's wait counts as the share of its requested run it is (or of `run`, the run its booking
    expects): the sum is then the (aged) slowdown the scheduler can see."""
    aged = 1 + max(0, now - req.arrival) // max(1, weights.aging)
    if weights.slowdown <= 0:
        return aged
    return max(1, aged * weights.slowdown // max(req.duration if run is None else run, SLOWDOWN_BOUND))


def _auto_lookahead(now: int, jobs: list[Job]) -> int:
    """Long enough that every tail fits one after another once every fixed occupancy and AR is over."""
    busy = [j.remaining + j.shutdown for j in jobs if j.role in (Role.FIXED, Role.SUSPENDABLE)]
    busy += [j.fixed_start - now + j.remaining + j.shutdown for j in jobs if j.fixed_start is not None]
    serial = sum(j.migrate + j.resume + j.remaining + j.shutdown for j in jobs if j.has_tail and j.fixed_start is None)
    return max(busy, default=0) + serial + 1


def _interchangeable(snap: RoundSnapshot, jobs: list[Job]) -> tuple[tuple[tuple[int, ...], ...], frozenset[int]]:
    """Identical nodes nothing refers to, each class cut to the number of VMs that could land there; and the cut-off
    nodes (any solution using them has a twin using the kept ones instead)."""
    # (a neighbourhood many leases share is one tuple, round_snapshot: each counted once)
    parts = {id(part): part for lease in snap.leases
             for part in (lease.nodes, lease.planned_nodes, lease.allowed_nodes) if part}
    touched = set().union(*parts.values())
    if snap.link is not None:   # a node whose cache holds an image, or that a booked transfer reaches, is not alike
        touched |= snap.link.nodes()
    movable_vms = max(1, sum(j.numvms for j in jobs if j.has_tail))
    classes, dropped = [], set()
    for group in snap.node_classes:
        free = tuple(n for n in group if n not in touched)
        if free:
            classes.append(free[:movable_vms])
            dropped.update(free[movable_vms:])
    return tuple(classes), frozenset(dropped)


def _with_candidates(job: Job, capacity: dict[int, dict[str, int]], dropped: frozenset[int],
                     migration: Migration, cache: dict) -> Job:
    """Each VM's candidate nodes: the nodes that hold it, within the lease's neighbourhood if it has one. `cache`
    keeps, per VM demand, the nodes that hold it (shared by every lease of the round: a 1,000-node round asks it
    once per demand, not once per lease)."""
    if not job.has_tail or job.candidates:   # pinned jobs come with their nodes
        return job
    allowed = job.allowed or None
    per_vm = []
    # a lease the round may suspend only for waiting ones is planned to resume on the nodes that hold its images:
    # that resume is a forecast, never committed by the round that suspends it (the suspension takes time, and a
    # round commits what starts now); where it resumes is decided by the rounds after, when it waits in the queue
    # with every node offered (models/cpsat-round.md, *Suspending for waiting leases*)
    own = tuple(sorted(set(job.origin))) \
        if job.origin and _for_waiting_only(job) and migration is not Migration.NO and not job.stays else None
    on_own: dict[tuple, tuple[int, ...]] = {}   # per VM demand, its own nodes that hold it
    for vm, demand in enumerate(job.demand):
        if own is not None:
            key = tuple(sorted(demand.items()))
            if key not in on_own:
                on_own[key] = tuple(n for n in own if _fits(demand, capacity[n]))
            per_vm.append(on_own[key])
            continue
        if job.origin and (migration is Migration.NO or job.stays):
            nodes = (job.origin[vm],)
            per_vm.append(nodes if _fits(demand, capacity[nodes[0]]) else ())
            continue
        key = tuple(sorted(demand.items()))
        if key not in cache:
            # per distinct capacity (nodes share them: _capacities), whether it holds the VM
            holds = {ident: _fits(demand, cap) for ident, cap in {id(c): c for c in capacity.values()}.items()}
            fit = frozenset(n for n, cap in capacity.items() if n not in dropped and holds[id(cap)])
            cache[key] = (fit, tuple(sorted(fit)))
        fit, every = cache[key]
        if allowed is None:
            per_vm.append(every)
            continue
        # a neighbourhood many leases share is one tuple (round_snapshot): looked up by identity (hashing a
        # 5,000-node tuple per lease cost more than the rest), the tuple kept alive in the entry
        got = cache.get((key, id(allowed)))
        if got is None:
            # a neighbourhood in node order whose every node holds the VM is its own candidate list (the
            # snapshot's are: one set operation, not a sort of thousands of nodes per lease)
            inside = allowed if fit.issuperset(allowed) and _ascending(allowed) \
                else tuple(sorted(fit.intersection(allowed)))
            got = cache[key, id(allowed)] = (allowed, inside)
        per_vm.append(got[1])
    return job.evolve(candidates=tuple(per_vm))


def _for_waiting_only(job: Job) -> bool:
    """Whether a running lease may be suspended only at its free end (for waiting leases, not for an AR)."""
    return job.role is Role.SUSPENDABLE and job.free_end is not None and job.suspend_ends == (job.free_end,)


def _ascending(nodes: tuple[int, ...]) -> bool:
    """Whether the nodes are in increasing order, each once."""
    return all(map(lt, nodes, nodes[1:]))


def always(value: object) -> bool:
    """Whether a model literal is the constant 1 (a tail that must be placed has no variable for it)."""
    return isinstance(value, int) and value == 1
