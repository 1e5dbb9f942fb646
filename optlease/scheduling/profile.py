"""Usage of one node (or of the site) over time: a piecewise-constant profile of usage vectors, aligned with the
site's resource types, and the questions the slot table and the mapper ask of it."""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from functools import lru_cache
from operator import add as _add, le as _le, sub as _sub

INF = float("inf")
Vec = tuple[int, ...]


# (two resource types, most sites': written out)
def vadd(a: Vec, b: Vec) -> Vec:
    if len(a) == 2:
        return a[0] + b[0], a[1] + b[1]
    return tuple(map(_add, a, b))


def vsub(a: Vec, b: Vec) -> Vec:
    if len(a) == 2:
        return a[0] - b[0], a[1] - b[1]
    return tuple(map(_sub, a, b))


def fits(need: Vec, free: Vec) -> bool:
    if len(need) == 2:
        return need[0] <= free[0] and need[1] <= free[1]
    return all(map(_le, need, free))


@lru_cache(maxsize=1024)
def vms_per_node(cap: Vec, shape: Vec) -> int | None:
    """How many VMs that each ask `shape` an empty node of capacity `cap` holds (None: the shape asks nothing):
    asked at every placement of VMs alike, of a site's few capacities and shapes."""
    return min((c // d for c, d in zip(cap, shape) if d > 0), default=None)


class Profile:
    """Usage over time: `u[i]` holds on [t[i], t[i+1]); zero before t[0] and after the last breakpoint's usage."""

    __slots__ = ("t", "u", "zero", "owners")

    def __init__(self, zero: Vec) -> None:
        self.t: list[int] = []
        self.u: list[Vec] = []
        self.zero = zero
        self.owners = 0   # in a slot table: how many nodes have this profile (SlotTable._change)

    def copy(self) -> "Profile":
        other = Profile(self.zero)
        other.t = self.t[:]
        other.u = self.u[:]
        return other

    def add(self, a: int, b: int, d: Vec, sign: int = 1) -> None:
        if a >= b:
            return
        t, u, zero = self.t, self.u, self.zero
        # Usage booked past every breakpoint (an idle node taking a lease, a booking after the last one): two
        # breakpoints appended, which is what the general case below gives there.
        if sign > 0 and d != zero and (not t or (a > t[-1] and u[-1] == zero)):
            t.append(a)
            t.append(b)
            u.append(d)
            u.append(zero)
            return
        # Taking back the last booking of a profile (a future booking cancelled, a node's only lease ending): its
        # two breakpoints go, and the one before when usage there is what it was before the booking.
        n = len(t)
        if sign < 0 and n >= 2 and t[-1] == b and t[-2] == a and u[-1] == zero and u[-2] == d:
            del t[-1]
            del u[-1]
            if (u[-2] if n > 2 else zero) == zero:
                del t[-1]
                del u[-1]
            else:
                u[-1] = zero
            return
        # Booking from the last breakpoint on, where usage is back to zero (a lease that starts where the last one
        # on a node ends): the zero segment becomes the booking, or extends the segment before when that holds
        # the same usage.
        if sign > 0 and n >= 2 and a == t[-1] and u[-1] == zero and d != zero:
            if u[-2] == d:
                t[-1] = b
            else:
                u[-1] = d
                t.append(b)
                u.append(zero)
            return
        # Taking back the tail of the last booking (a lease that ends early): its end moves to a.
        if sign < 0 and n >= 2 and t[-1] == b and t[-2] < a < b and u[-1] == zero and u[-2] == d:
            t[-1] = a
            return
        # Breakpoints at a and b (inlined: this is the hottest path of a simulation).
        i = bisect_left(t, a)
        if i == len(t) or t[i] != a:
            t.insert(i, a)
            u.insert(i, u[i - 1] if i > 0 else zero)
        j = bisect_left(t, b, i)
        if j == len(t) or t[j] != b:
            t.insert(j, b)
            u.insert(j, u[j - 1])
        if len(d) == 2:     # (most sites have two resource types: the vectors' sums written out)
            d0, d1 = d if sign > 0 else (-d[0], -d[1])
            for k in range(i, j):
                x, y = u[k]
                u[k] = (x + d0, y + d1)
        else:
            op = _add if sign > 0 else _sub
            for k in range(i, j):
                u[k] = tuple(map(op, u[k], d))
        if j < len(t) and u[j] == u[j - 1]:
            del t[j]
            del u[j]
        if u[i] == (u[i - 1] if i > 0 else zero):
            del t[i]
            del u[i]

    def at(self, x: int) -> Vec:
        i = bisect_right(self.t, x) - 1
        return self.u[i] if i >= 0 else self.zero

    def next_change(self, x: int) -> int | None:
        """The first breakpoint after x, or None when usage never changes again."""
        i = bisect_right(self.t, x)
        return self.t[i] if i < len(self.t) else None

    def fits_between(self, a: int, b: int, need: Vec, cap: Vec) -> bool:
        """Whether `need` fits beside the usage at every instant of [a, b)."""
        t, u = self.t, self.u
        i = bisect_right(t, a) - 1
        cur = u[i] if i >= 0 else self.zero
        n_t = len(t)
        if len(need) == 2:      # (two resource types: the comparisons written out)
            l0, l1 = cap[0] - need[0], cap[1] - need[1]
            if cur[0] > l0 or cur[1] > l1:
                return False
            i += 1
            while i < n_t and t[i] < b:
                c0, c1 = u[i]
                if c0 > l0 or c1 > l1:
                    return False
                i += 1
            return True
        if not all(map(_le, map(_add, need, cur), cap)):
            return False
        i += 1
        while i < n_t and t[i] < b:
            if not all(map(_le, map(_add, need, u[i]), cap)):
                return False
            i += 1
        return True

    def earliest_room(self, a: int, length: int, need: Vec, cap: Vec) -> float:
        """The earliest x >= a such that `need` fits beside the usage over all of [x, x + length) (INF: never).
        One pass over the breakpoints from a: x is where the current run of segments with room began."""
        t, u = self.t, self.u
        n_t = len(t)
        i = bisect_right(t, a) - 1
        x = a
        if len(need) == 2:      # (two resource types: the comparisons written out)
            l0, l1 = cap[0] - need[0], cap[1] - need[1]
            while True:
                c0, c1 = u[i] if i >= 0 else self.zero
                nxt = t[i + 1] if i + 1 < n_t else INF
                if c0 <= l0 and c1 <= l1:
                    if nxt >= x + length:
                        return x
                elif nxt == INF:
                    return INF
                else:
                    x = nxt
                i += 1
        while True:
            cur = u[i] if i >= 0 else self.zero
            nxt = t[i + 1] if i + 1 < n_t else INF
            if all(map(_le, map(_add, need, cur), cap)):
                if nxt >= x + length:
                    return x
            elif nxt == INF:
                return INF
            else:
                x = nxt
            i += 1

    def first_exceeding(self, a: int, need: Vec, cap: Vec) -> float:
        """From a on, the first time at which `need` no longer fits beside the usage (INF if never)."""
        t, u = self.t, self.u
        i = bisect_right(t, a) - 1
        cur = u[i] if i >= 0 else self.zero
        if len(need) == 2:      # (two resource types: the comparisons written out)
            l0, l1 = cap[0] - need[0], cap[1] - need[1]
            if cur[0] > l0 or cur[1] > l1:
                return a
            for i in range(i + 1, len(t)):
                c0, c1 = u[i]
                if c0 > l0 or c1 > l1:
                    return t[i]
            return INF
        if not all(map(_le, map(_add, need, cur), cap)):
            return a
        i += 1
        while i < len(t):
            if not all(map(_le, map(_add, need, u[i]), cap)):
                return t[i]
            i += 1
        return INF

    def stale(self, before: int) -> bool:
        """Whether `prune(before)` would change anything."""
        t = self.t
        if not t or t[0] > before:
            return False
        return bisect_right(t, before) > 1 or self.u[0] == self.zero

    def prune(self, before: int) -> None:
        """Forget breakpoints that no query at or after `before` can see."""
        i = bisect_right(self.t, before) - 1
        if i > 0:
            del self.t[:i]
            del self.u[:i]
        # A first segment at zero says what holds before it anyway: dropping it leaves an idle node's profile empty.
        if i >= 0 and self.u[0] == self.zero:
            del self.t[0]
            del self.u[0]
