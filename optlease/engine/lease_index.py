"""The leases in the system by state, kept up to date lease by lease instead of read from every lease.

The manager notes every lease a change touches (a step, a cancellation, a failure, a requeue, a deferral: the
leases it journals and publishes). That is every lease whose state changed, so the index answers, without a walk
over the 100,000 leases of a large site: the state each lease had before a step (what a late or missed step logs
and what catch-up takes back), the leases in one state (the advance reservations whose window a restart finds
passed), and the leases that may hold a node (those a host going silent takes with it: `on_node`, a superset that
the caller filters with engine.loop.on_node).
"""
from __future__ import annotations

from typing import Iterable, Mapping

from optlease.domain.lease import LeaseState


class LeaseIndex:
    def __init__(self) -> None:
        self.state_of: dict[int, LeaseState] = {}               # lease in the system -> its state
        self.with_state: dict[LeaseState, set[int]] = {}        # state -> the leases in the system in it
        self._prior: dict[int, LeaseState | None] | None = None  # while recording: lease -> state before
        self.on_node: dict[int, set[int]] = {}     # node -> the leases in the system that may hold it
        self._nodes_of: dict[int, frozenset] = {}   # lease -> the nodes it is filed under in on_node

    def rebuild(self, in_system: Mapping[int, object]) -> None:
        """Index every lease in the system afresh (after a replay or a checkpoint's restore)."""
        self.state_of.clear()
        self.with_state.clear()
        self.on_node.clear()
        self._nodes_of.clear()
        self.note(in_system.values(), in_system)

    def note(self, leases: Iterable, in_system: Mapping[int, object]) -> None:
        """These leases (Lease records) changed; `in_system`: the scheduler's leases (id -> Lease) now."""
        prior = self._prior
        for lease in leases:
            old = self.state_of.pop(lease.id, None)
            if old is not None:
                self.with_state[old].discard(lease.id)
            if prior is not None and lease.id not in prior:
                prior[lease.id] = old
            if lease.id in in_system:
                self.state_of[lease.id] = lease.state
                self.with_state.setdefault(lease.state, set()).add(lease.id)
            self._file(lease.id, nodes_named(lease) if lease.id in in_system else frozenset())

    def _file(self, lease_id: int, nodes: frozenset) -> None:
        """File a lease under the nodes its reservations and images name now (and under no other)."""
        old = self._nodes_of.pop(lease_id, frozenset())
        if nodes:
            self._nodes_of[lease_id] = nodes
        if old == nodes:
            return
        for node in old - nodes:
            self.on_node[node].discard(lease_id)
        for node in nodes - old:
            self.on_node.setdefault(node, set()).add(lease_id)

    def record(self) -> None:
        """From now on, remember the state each touched lease had before its first change."""
        self._prior = {}

    def recorded(self) -> dict[int, LeaseState]:
        """The state before `record` of each lease touched since that was in the system then; recording stops."""
        prior, self._prior = self._prior or {}, None
        return {lease_id: state for lease_id, state in prior.items() if state is not None}

    def ids_in(self, state: LeaseState) -> list[int]:
        """The leases in the system in that state, in id order."""
        return sorted(self.with_state.get(state, ()))


def nodes_named(lease) -> frozenset:
    """Every node a lease's current reservations (whatever their state) map a VM to or take room on, and where its
    memory images are: those it may hold (engine.loop.on_node decides, with the reservations' states)."""
    nodes: set[int] = set()
    vmrr = lease.last_vmrr()
    if vmrr is not None:
        for rr in (*vmrr.pre, vmrr, *vmrr.post):
            nodes.update(rr.mapping.values())
            nodes.update(rr.demand)
    if lease.image_nodes is not None:
        nodes.update(lease.image_nodes.values())
    return frozenset(nodes)
