"""Lease states as Haizea's XML-RPC API writes them: a numeric code in the `state` attribute (Haizea 1.1's
`Lease.STATE_*`, which its clients read with `int()`), and the name its tables print for each code.

optlease's daemon sends the codes so that Haizea's own clients (haizea-list-leases, haizea-show-queue) work against
it; optlease's client commands turn them back into names.
"""
from __future__ import annotations

from optlease.domain.lease import LeaseState

S = LeaseState
# Haizea 1.1's numbering; its Preparing (6), Ready (7), Resumed-Ready (15) and Rejected-by-user (18) have no
# optlease counterpart and are never sent.
HAIZEA_CODE: dict[LeaseState, int] = {
    S.NEW: 0, S.PENDING: 1, S.REJECTED: 2, S.SCHEDULED: 3, S.QUEUED: 4, S.CANCELLED: 5, S.ACTIVE: 8,
    S.SUSPENDING: 9, S.SUSPENDED_PENDING: 10, S.SUSPENDED_QUEUED: 11, S.SUSPENDED_SCHEDULED: 12, S.MIGRATING: 13,
    S.RESUMING: 14, S.DONE: 16, S.FAILED: 17,
}
_BY_CODE = {str(code): state for state, code in HAIZEA_CODE.items()}


def state_label(state: LeaseState) -> str:
    """Haizea's spelling: Scheduled, Active, Suspended-Queued..."""
    return "-".join(p.capitalize() for p in state.value.split("-"))


def label_of_code(code: str) -> str:
    """The name for a `state` attribute as a server sent it: a Haizea code (a name is passed through)."""
    state = _BY_CODE.get(code.strip())
    return state_label(state) if state is not None else code
