"""The leases waiting in the queue, in the queue's order, as the leaves of a tree whose every node knows the least any
lease under it needs (of each resource type) and the shortest window it must have room over from its start: the
sweep over the queue (`QueuePass._sweep`) walks down only where a lease could pass the quick tests (its need within
the site's room over its window from now) and so stops at the first lease that can start, at a cost that follows
the leases it looks at, not the queue's length. A lease the pass must look at whatever the room (a suspended lease,
with tests of its own) is always walked to.

A lease passed over so is not marked as having failed with the pass's key: under one key nothing began or ended (or
was taken out) since, so what the site has free at the instant is the same and its room over a window from the
instant no larger (the window only moves later), and the lease fails the same tests again."""
from __future__ import annotations

from bisect import bisect_left

from optlease.scheduling.profile import fits

ALWAYS = ((), 0, True)      # a leaf's bound where the lease is looked at whatever the room


def order(lease) -> tuple:
    """Where a lease stands in the queue, which is kept in this order (`QueuePass.enqueue`)."""
    return lease.req.arrival, lease.id


def position(queue: list, lease) -> int:
    """Where the lease stands in `queue` (a stretch of the queue, in its order)."""
    return bisect_left(queue, order(lease), key=order)


def _join(a, b):
    """A node's bound from its two halves' (None: no lease under it; a half holding a lease looked at whatever the
    room makes the node one too)."""
    if a is None:
        return b
    if b is None:
        return a
    if a[2] or b[2]:
        return ALWAYS
    return (a[0] if a[0] == b[0] else tuple(map(min, a[0], b[0]))), min(a[1], b[1]), False


class WaitIndex:
    """The waiting leases in the queue's order, at slots of a tree (a slot whose lease left stays empty until the
    tree is made again). `bound(lease)`: (its need, its window), or None where the pass looks at it whatever the
    room."""

    def __init__(self, bound) -> None:
        self.bound = bound
        self.rebuild([])

    def __len__(self) -> int:
        return self.size

    def rebuild(self, leases: list) -> None:
        """The index of these leases (in the queue's order) alone."""
        n = 1
        while n < len(leases) + 8:
            n *= 2
        self.width = n
        self.slots: list = leases + [None] * (n - len(leases))
        self.orders: list = [order(lease) for lease in leases]
        self.used = len(leases)     # slots filled so far (each later one empty)
        self.size = len(leases)
        bound = self.bound
        tree = self.tree = [None] * (2 * n)
        for i, lease in enumerate(leases):
            found = bound(lease)
            tree[n + i] = ALWAYS if found is None else (found[0], found[1], False)
        for k in range(n - 1, 0, -1):
            tree[k] = _join(tree[2 * k], tree[2 * k + 1])

    def _set(self, i: int, leaf) -> None:
        tree = self.tree
        k = self.width + i
        tree[k] = leaf
        k //= 2
        while k:
            tree[k] = _join(tree[2 * k], tree[2 * k + 1])
            k //= 2

    def add(self, lease) -> None:
        """A lease joins the queue at its place: at the next slot where it comes after every lease (most arrivals),
        else the tree is made again with it."""
        key = order(lease)
        if self.used < self.width and (not self.orders or self.orders[-1] < key):
            i = self.used
            self.used += 1
            self.size += 1
            self.slots[i] = lease
            self.orders.append(key)
            found = self.bound(lease)
            self._set(i, ALWAYS if found is None else (found[0], found[1], False))
            return
        leases = [x for x in self.slots[:self.used] if x is not None]
        leases.insert(bisect_left(leases, key, key=order), lease)
        self.rebuild(leases)

    def remove(self, lease) -> None:
        """A lease leaves the queue (nothing happens where the index does not hold it: the queue and the index then
        differ in length, and the pass makes the index again)."""
        i = bisect_left(self.orders, order(lease))
        if i == self.used or self.slots[i] is not lease:
            return
        self.slots[i] = None
        self.size -= 1
        self._set(i, None)
        if self.size * 4 < self.used and self.used > 64:
            self.rebuild([x for x in self.slots[:self.used] if x is not None])

    def candidates(self, key: tuple, room):
        """The leases from the first at or after `key` in the queue's order on, in that order, that could pass the
        quick tests (`room(window)`: what the site has free over a window from now) or are looked at whatever the
        room. A lease that leaves the index meanwhile is not yielded."""
        i = bisect_left(self.orders, key)
        while True:
            i = self._first(1, 0, self.width, i, room)
            if i is None:
                return
            lease = self.slots[i]
            if lease is not None:
                yield lease
            i += 1

    def _first(self, k: int, lo: int, hi: int, at: int, room) -> int | None:
        """The first slot at or after `at` in node k (slots lo..hi-1) whose lease could pass (None: none)."""
        if hi <= at:
            return None
        node = self.tree[k]
        if node is None or not (node[2] or fits(node[0], room(node[1]))):
            return None
        if hi - lo == 1:
            return lo
        mid = (lo + hi) // 2
        found = self._first(2 * k, lo, mid, at, room)
        return found if found is not None else self._first(2 * k + 1, mid, hi, at, room)
