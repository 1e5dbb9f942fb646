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


def _first_of(item: tuple):
    return item[0]


def _leaf(lease, bound) -> tuple:
    """A lease's leaf: its bound, or ALWAYS."""
    found = bound(lease)
    return ALWAYS if found is None else (found[0], found[1], False)


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
    tree is made again). `bound(lease)`, given where leases come in: (its need, its window), or None where the pass
    looks at it whatever the room (given, not kept: a daemon's checkpoint pickles the index with its scheduler)."""

    def __init__(self) -> None:
        self.rebuild([], None)

    def __len__(self) -> int:
        return self.size

    def rebuild(self, leases: list, bound, leaves: list | None = None) -> None:
        """The index of these leases (in the queue's order) alone (`leaves`: their bounds, where known)."""
        n = 1
        while n < len(leases) + 8:
            n *= 2
        self.width = n
        self.slots: list = leases + [None] * (n - len(leases))
        self.orders: list = [order(lease) for lease in leases]
        self.used = len(leases)     # slots filled so far (each later one empty)
        self.size = len(leases)
        tree = self.tree = [None] * (2 * n)
        tree[n:n + len(leases)] = [_leaf(lease, bound) for lease in leases] if leaves is None else leaves
        for k in range(n - 1, 0, -1):
            tree[k] = _join(tree[2 * k], tree[2 * k + 1])

    def _compact(self, lease=None, bound=None) -> None:
        """The tree made again from the leases it holds (and `lease`, at its place), their bounds kept."""
        n, used = self.width, self.used
        held = [(self.orders[i], x, self.tree[n + i]) for i, x in enumerate(self.slots[:used]) if x is not None]
        if lease is not None:
            key = order(lease)
            held.insert(bisect_left(held, key, key=_first_of), (key, lease, _leaf(lease, bound)))
        self.rebuild([x for _, x, _ in held], bound, [leaf for _, _, leaf in held])

    def _set(self, i: int, leaf) -> None:
        tree = self.tree
        k = self.width + i
        tree[k] = leaf
        k //= 2
        while k:
            tree[k] = _join(tree[2 * k], tree[2 * k + 1])
            k //= 2

    def add(self, lease, bound) -> None:
        """A lease joins the queue at its place: at the next slot where it comes after every lease (most arrivals),
        at an empty slot at its place (a lease going back to where it stood), else the tree is made again with it."""
        key = order(lease)
        orders = self.orders
        used = self.used
        i = bisect_left(orders, key)
        if i == used and used < self.width:
            self.used += 1
            orders.append(key)
        elif i < used and self.slots[i] is None:
            orders[i] = key     # (orders[i - 1] < key <= the old orders[i] < orders[i + 1])
        elif i > 0 and self.slots[i - 1] is None:
            i -= 1
            orders[i] = key     # (orders[i - 1] <= the old orders[i] < key < orders[i + 1])
        else:
            self._compact(lease, bound)
            return
        self.size += 1
        self.slots[i] = lease
        self._set(i, _leaf(lease, bound))

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
            self._compact()

    def candidates(self, key: tuple, room):
        """The leases from the first at or after `key` in the queue's order on, in that order, that could pass the
        quick tests (`room(window)`: what the site has free over a window from now, never more for a longer one)
        or are looked at whatever the room."""
        tree, slots, n = self.tree, self.slots, self.width
        rooms: dict = {}
        k = n + bisect_left(self.orders, key)
        while True:
            node = tree[k]
            if node is not None:
                if node[2]:
                    ok = True
                else:
                    free = rooms.get(node[1])
                    if free is None:
                        free = rooms[node[1]] = room(node[1])
                    ok = fits(node[0], free)
                if ok:
                    if k >= n:
                        yield slots[k - n]
                    else:
                        k *= 2      # (the left half first)
                        continue
            # on to the next stretch of slots to the right
            while k & 1:
                k >>= 1
            if not k:
                return
            k += 1
