"""What the site has room for from one instant on, over windows of any length: the questions a pass over the queue
asks of every waiting lease that must start at that instant, answered from one walk of the table shared by them all
(the table does not change in a pass until a lease is booked, and the pass then asks again)."""
from __future__ import annotations

from bisect import bisect_left, bisect_right

from optlease.scheduling.mapper import vms_of
from optlease.scheduling.profile import Vec, fits, vms_per_node, vsub

# Leases of fewer VMs are not asked whether the nodes could hold them (`holds`): the mapper's walk for them is short,
# and asking costs a look at every busy profile
WIDE = 16


class RoomAhead:
    """The site's room from instant `t` on, for a table that does not change meanwhile (one per pass over the queue
    and instant: `QueuePass._room_over_window`)."""

    def __init__(self, table, t: int) -> None:
        self.table = table
        self.t = t
        total = table.total
        self.times = total.t
        self.first = bisect_right(self.times, t)     # the first breakpoint after t
        i = self.first - 1
        # worst[k]: the most in use at any instant from t to the k-th breakpoint after t (excluded)
        self.worst: list[Vec] = [total.u[i] if i >= 0 else table.zero]
        self.held: dict[tuple, int] = {}

    def fits(self, need: Vec, length: int) -> bool:
        """Whether the site as a whole has `need` free at every instant of [t, t + length) (at t alone when
        `length` is 0): `SlotTable.earliest_total_room(t, length, need) == t`."""
        return fits(need, self.room(length))

    def room(self, length: int) -> Vec:
        """What the site as a whole has free at every instant of [t, t + length) (at t alone when `length` is 0):
        the least of each resource over the stretch."""
        k = bisect_left(self.times, self.t + length, self.first) - self.first if length else 0
        worst = self.worst
        if k >= len(worst):
            usage = self.table.total.u
            last = worst[-1]
            for i in range(self.first + len(worst) - 1, self.first + k):
                last = tuple(map(max, last, usage[i]))
                worst.append(last)
        return vsub(self.table.total_cap, worst[k])

    def admits(self, lease, length: int, placed: bool) -> bool:
        """`fits` for the lease's total need and, where the mapper places it (`placed`) and its VMs ask alike,
        `holds` for its VMs."""
        if not self.fits(lease.total_demand, length):
            return False
        most = len(lease.demands)
        shape = vms_of(lease)[1] if placed and most >= WIDE else None
        return shape is None or self.holds(shape, length, most)

    def holds(self, shape: Vec, length: int, most: int) -> bool:
        """Whether the site's nodes could hold `most` VMs that each ask `shape` over [t, t + length), each node as
        many as fit beside its usage there (`SlotTable.holds_over`; True where that is not known): a necessary
        condition for a placement the search keeps (`VMScheduler._too_few_hold`)."""
        table = self.table
        cap = table.one_cap
        if cap is None or table.down:
            return True
        per = vms_per_node(cap, shape)
        if per is None or len(table.idle.get(cap, ())) * per >= most:
            return True
        key = (shape, length)
        held = self.held.get(key)
        if held is None:
            held = self.held[key] = table.holds_over(self.t, length, shape, None)
        return held >= most
