"""How long a best-effort booking holds its VMs (`[scheduling] runtime-estimate`).

`requested` (Haizea's way, the default): the time the lease asked for. `user-history`: the mean of the last two runs
of the same user's best-effort leases that have finished (Tsafrir, Etsion and Feitelson's predictor), plus the time
it takes to suspend the lease, when that is shorter than what it asked for. Users ask for far more than they use, so
bookings of the requested time leave holes no waiting lease fits and put short leases at the back of the line.

A booking made from an estimate carries a checkpoint: the estimate's end. A lease still running there has its
booking grown to the whole requested time (LeaseScheduler.overrun). The suspension margin after the checkpoint is
what makes that safe: an AR booked right after the estimate still finds the lease suspended before it starts.
A lease suspended before its estimate ran out (booked into a hole, or for an AR) books the rest of its estimate
when it resumes, with a checkpoint of its own: resumed where its memory image is, on nodes it cannot leave, it
needs a hole as long as what it is likely to run, not as long as what it asked for. A lease that has run past an
estimate books the rest of its requested time from then on. Only leases that may be suspended and whose user is
known get estimates; the others book what they asked for.
"""
from __future__ import annotations

import math

from optlease.domain.lease import LeaseKind
from optlease.scheduling import overheads as oh
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.records import Lease

HISTORY = 2   # runs remembered per user


def user_of(lease: Lease) -> str | None:
    """Whose lease this is: a request's `user`, or the user column of an SWF trace (unknown there is -1)."""
    extra = lease.req.extra
    user = extra.get("user") or extra.get("swf-user")
    return None if user in (None, "", "-1") else user


class RunEstimates:
    """The runs each user's finished best-effort leases really had, and the booking length they give."""

    def __init__(self, opts: SchedulingOptions) -> None:
        self.opts = opts
        self.enabled = opts.runtime_estimate == "user-history"
        self.history: dict[str, list[int]] = {}

    def learn(self, lease: Lease) -> None:
        """A lease has finished: remember how long it really ran (what the scheduler saw it run)."""
        if not self.enabled:
            return
        user = user_of(lease)
        if user is None or lease.kind is not LeaseKind.BEST_EFFORT:
            return
        runs = self.history.setdefault(user, [])
        runs.append(lease.accumulated)
        del runs[:-HISTORY]

    def booked_run(self, lease: Lease) -> int:
        """How long the lease's next booking runs its VMs: what it has left, or what its estimate has left (all of
        it before a first start) plus the margin to suspend it when that is shorter."""
        remaining = lease.remaining()
        if not self.enabled or lease.overruns or lease.kind is not LeaseKind.BEST_EFFORT \
                or not oh.can_be_suspended(lease, self.opts):
            return remaining
        runs = self.history.get(user_of(lease))
        if not runs:
            return remaining
        left = max(1, math.ceil(sum(runs) / len(runs))) - lease.accumulated   # suspended: what the estimate has left
        if left <= 0:
            return remaining
        held = left + self.margin(lease)
        return held if held < remaining else remaining

    def margin(self, lease: Lease) -> int:
        """The longest its suspension can take, wherever its VMs are: one VM after another."""
        if "margin" not in lease.cache:
            lease.cache["margin"] = oh.serial_time(lease, self.opts, suspend=True)
        return lease.cache["margin"]
