"""Runtime records of one run: resource reservations (RRs) and the scheduler's bookkeeping of each lease."""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat

from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState, check_transition

# Reservation kinds. `migrate` is the copy of a suspended lease's memory image between nodes: it holds no node
# capacity (the VM is not running) and is written to schedule files as a `migrate` with a `from` mapping and
# `"what": "memory-image"`. `transfer` is a disk image sent from the repository (scheduling.preparation): it holds no
# node capacity either.
VM, SUSPEND, RESUME, SHUTDOWN, MIGRATE, TRANSFER = "vm", "suspend", "resume", "shutdown", "migrate", "transfer"


class RR:
    """One resource reservation: `mapping` vnode -> pnode, `demand` pnode -> usage vector held on [start, end)."""

    __slots__ = ("lease", "kind", "start", "end", "mapping", "demand", "state", "pre", "post", "seq",
                 "backfill", "origin", "first", "last", "vm", "checkpoint", "extra")

    def __init__(self, lease: "Lease", kind: str, start: int, end: int, mapping: dict[int, int],
                 demand: dict[int, tuple], seq: int) -> None:
        self.lease = lease
        self.kind = kind
        self.start = start
        self.end = end
        self.mapping = mapping
        self.demand = demand
        self.state = "scheduled"      # scheduled -> active -> done
        self.pre: list[RR] = []       # vm RRs: migration and resume RRs before it
        self.post: list[RR] = []      # vm RRs: suspend or shutdown RRs after it
        self.seq = seq
        self.backfill = False         # vm RRs: a best-effort reservation made for the future
        self.origin: dict[int, int] | None = None  # migrate RRs: where the image comes from
        self.first = True             # suspend/resume blocks: first and last of their operation
        self.last = True
        self.vm: RR | None = None     # suspend/resume/shutdown RRs: their vm RR
        # vm RRs booked from a run-time estimate: when the estimate runs out, and the lease, if it still runs, gets
        # its whole requested time (scheduling.estimate)
        self.checkpoint: int | None = None
        self.extra: dict | None = None    # more keys for the schedule file (a copy over the repository's link)

    def begin(self) -> int:
        """VM RRs: when the reservation begins to hold anything: its first migration or resume, or its run."""
        return self.pre[0].start if self.pre else self.start

    def finish(self) -> int:
        """VM RRs: when the reservation holds nothing any more: after its suspension or shutdown."""
        return self.post[-1].end if self.post else self.end

    def total(self) -> tuple:
        """Usage summed over nodes: the lease's whole footprint (every reservation that holds any holds all)."""
        if len(self.demand) == 1:
            return next(iter(self.demand.values()))
        if len(self.mapping) == len(self.lease.demands):
            return self.lease.total_demand
        total = None
        for d in self.demand.values():
            total = d if total is None else tuple(x + y for x, y in zip(total, d))
        return total

    def nodes(self) -> list[int]:
        mapping = self.mapping
        if type(mapping) is Placement:
            return list(mapping.pnodes)
        return [mapping[v] for v in sorted(mapping)]

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"RR({self.kind} lease={self.lease.id} {self.start}-{self.end} {self.mapping})"


class _Vnodes(Mapping):
    """A mapping keyed by vnodes 1..n (n = its length), read as the dict it stands for."""

    __slots__ = ()

    def __iter__(self):
        return iter(range(1, len(self) + 1))

    def __contains__(self, vnode) -> bool:
        return vnode in range(1, len(self) + 1)    # (as a dict's: a key equal to one of 1..n is in it)

    def keys(self) -> range:
        return range(1, len(self) + 1)

    __hash__ = None     # (a dict's: not hashable)


class AlikeVMs(_Vnodes):
    """vnode -> usage vector for vnodes 1..n that all ask one vector: a lease's demands, read as a dict, with no
    entry per VM (a wide lease's VMs most often ask alike)."""

    __slots__ = ("n", "shape")

    def __init__(self, n: int, shape: tuple) -> None:
        self.n = n
        self.shape = shape

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, vnode: int) -> tuple:
        if type(vnode) is int and 1 <= vnode <= self.n or vnode in range(1, self.n + 1):
            return self.shape
        raise KeyError(vnode)

    def values(self):
        return repeat(self.shape, self.n)

    def items(self):
        return zip(range(1, self.n + 1), repeat(self.shape))

    def __eq__(self, other) -> bool:
        if type(other) is AlikeVMs:
            return self.n == other.n and (self.shape == other.shape or not self.n)
        return Mapping.__eq__(self, other)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"AlikeVMs({self.n} x {self.shape})"


class Placement(_Vnodes):
    """vnode -> pnode for vnodes 1..n, kept as the pnodes in vnode order: a reservation's mapping with one pointer
    per VM, read as a dict (a dict's entries cost five times that, and a wide lease's reservations are kept for its
    whole history). Never changed in place."""

    __slots__ = ("pnodes",)

    def __init__(self, pnodes: tuple) -> None:
        self.pnodes = pnodes

    def __len__(self) -> int:
        return len(self.pnodes)

    def __getitem__(self, vnode: int) -> int:
        if type(vnode) is int and 1 <= vnode <= len(self.pnodes):
            return self.pnodes[vnode - 1]
        vnodes = range(1, len(self.pnodes) + 1)
        if vnode in vnodes:
            return self.pnodes[vnodes.index(vnode)]
        raise KeyError(vnode)

    def values(self) -> tuple:
        return self.pnodes

    def items(self):
        return zip(range(1, len(self.pnodes) + 1), self.pnodes)

    def __eq__(self, other) -> bool:
        if type(other) is Placement:
            return self.pnodes == other.pnodes
        return Mapping.__eq__(self, other)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


class OneVMEach(Mapping):
    """pnode -> usage vector for distinct pnodes that each hold one VM of one demand: a reservation's demand, read
    as the dict it stands for, with no entry per node (its nodes are the tuple of its placement's pnodes)."""

    __slots__ = ("nodes", "shape", "_members", "stretched")

    def __init__(self, nodes: tuple, shape: tuple) -> None:
        self.nodes = nodes
        self.shape = shape
        self._members: frozenset | None = None     # (built when first asked whether a node is one of them)
        # its nodes in order and their stretches of consecutive ids, as nodeclasses.stretches gives them (False:
        # not asked yet): the slot table asks at every change of its reservation, and the answer never changes
        self.stretched = False

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self):
        return iter(self.nodes)

    def __contains__(self, pnode) -> bool:
        members = self._members
        if members is None:
            members = self._members = frozenset(self.nodes)
        return pnode in members

    def __getitem__(self, pnode) -> tuple:
        if pnode in self:
            return self.shape
        raise KeyError(pnode)

    def values(self):
        return repeat(self.shape, len(self.nodes))

    def items(self):
        return zip(self.nodes, repeat(self.shape))

    __hash__ = None     # (a dict's: not hashable)

    def __getstate__(self):
        return self.nodes, self.shape

    def __setstate__(self, state) -> None:
        self.nodes, self.shape = state
        self._members = None
        self.stretched = False

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"OneVMEach({len(self.nodes)} nodes x {self.shape})"


def placement(mapping, n: int) -> Mapping:
    """A reservation's own mapping from the mapping vnode -> pnode it is given: a Placement where it places vnodes
    1..n, else a copy (the caller's mapping may change afterwards; a Placement never does)."""
    if type(mapping) is Placement:
        return mapping
    if len(mapping) == n:
        try:
            return Placement(tuple(map(mapping.__getitem__, range(1, n + 1))))
        except KeyError:
            pass
    return dict(mapping)


@dataclass
class Held:
    """A reservation as it really happened, kept for the schedule file."""

    kind: str
    start: int
    end: int
    mapping: dict[int, int]
    origin: dict[int, int] | None = None
    outcome: str | None = None
    extra: dict | None = None     # more keys for the schedule file (a transfer's image, size, link and id)


WAITING = (LeaseState.QUEUED, LeaseState.SUSPENDED_QUEUED)          # best-effort, in the queue
BOOKED = (LeaseState.SCHEDULED, LeaseState.SUSPENDED_SCHEDULED)     # best-effort, booked and not begun


@dataclass(eq=False)
class Lease:
    """The scheduler's view of one lease: its request, state, progress and reservations."""

    req: LeaseRequest
    demands: dict[int, tuple]                 # vnode -> usage vector
    state: LeaseState = LeaseState.NEW
    accumulated: int = 0                      # seconds of the requested duration already run
    vmrrs: list[RR] = field(default_factory=list)
    held: list[Held] = field(default_factory=list)
    image_nodes: dict[int, int] | None = None  # where a suspended lease's memory image is (vnode -> pnode)
    first_start: int | None = None
    end: int | None = None
    reason: str | None = None
    preemptions: int = 0
    suspensions: int = 0
    migrations: int = 0
    requeues: int = 0
    overruns: int = 0                         # times it ran past the run-time estimate it was booked for
    cache: dict = field(default_factory=dict)  # derived figures that never change (total demand, estimates)
    # while it waits in the queue: the wait class it was last passed over in and the key it then failed with (it is
    # passed over while its class's key equals it: `QueuePass`); plain attributes, read for every lease at every pass
    wait_class: object = field(default=None, repr=False)
    failed_with: tuple | None = field(default=None, repr=False)
    # its request's id and kind, read at every turn of the scheduler: plain attributes (a request never changes)
    id: int = field(init=False, repr=False)
    kind: LeaseKind = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.id = self.req.id
        self.kind = self.req.kind

    @cached_property
    def total_demand(self) -> tuple:
        """The usage of all its VMs together (its demands never change: computed once)."""
        # counted by shape: a wide lease's VMs most often ask alike, and integer sums do not depend on the order
        if type(self.demands) is AlikeVMs:
            return tuple(x * self.demands.n for x in self.demands.shape)
        total = None
        for d, n in Counter(self.demands.values()).items():
            d = tuple(x * n for x in d)
            total = d if total is None else tuple(x + y for x, y in zip(total, d))
        return total

    @property
    def numnodes(self) -> int:
        return self.req.numnodes

    def demands_key(self) -> tuple:
        """What names its demands, for caches of answers that depend on them alone (VMs alike: the vector and a
        count, not a look at each VM)."""
        demands = self.demands
        if type(demands) is AlikeVMs:
            return ("alike", demands.n, demands.shape)
        return tuple(map(demands.__getitem__, sorted(demands)))

    def set_state(self, new: LeaseState) -> None:
        check_transition(self.id, self.state, new)
        self.state = new

    def remaining(self) -> int:
        return self.req.duration - self.accumulated

    def real_remaining(self) -> int:
        return self.req.actual_duration - self.accumulated

    def last_vmrr(self) -> RR | None:
        return self.vmrrs[-1] if self.vmrrs else None

    def is_suspended(self) -> bool:
        return self.state in (LeaseState.SUSPENDED_PENDING, LeaseState.SUSPENDED_QUEUED,
                              LeaseState.SUSPENDED_SCHEDULED, LeaseState.MIGRATING)


class NotSchedulable(Exception):
    """A lease cannot be placed now (an expected refusal: carries the reason). `walked`: the search that refused it
    walked the nodes in the host policy's order at a start where the site had room; where that order moves with the
    instant, the order itself may have decided the refusal (`QueuePass._tried`)."""

    def __init__(self, reason: str = "", walked: bool = False) -> None:
        super().__init__(reason)
        self.walked = walked
