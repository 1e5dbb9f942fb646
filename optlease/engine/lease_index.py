"""The leases in the system by state, kept up to date lease by lease instead of read from every lease.

The manager notes every lease a change touches (a step, a cancellation, a failure, a requeue, a deferral: the
leases it journals and publishes). That is every lease whose state changed, so the index answers, without a walk
over the 100,000 leases of a large site: the state each lease had before a step (what a late or missed step logs
and what catch-up takes back), and the leases in one state (the advance reservations whose window a restart
finds passed).
"""
from __future__ import annotations

from typing import Iterable, Mapping

from optlease.domain.lease import LeaseState


class LeaseIndex:
    def __init__(self) -> None:
        self.state_of: dict[int, LeaseState] = {}               # lease in the system -> its state
        self.with_state: dict[LeaseState, set[int]] = {}        # state -> the leases in the system in it
        self._prior: dict[int, LeaseState | None] | None = None  # while recording: lease -> state before

    def rebuild(self, in_system: Mapping[int, object]) -> None:
        """Index every lease in the system afresh (after a replay or a checkpoint's restore)."""
        self.state_of.clear()
        self.with_state.clear()
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
