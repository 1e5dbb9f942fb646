"""Disk-image caches on the nodes (`[deploy-imagetransfer] diskimage-reuse: image-caches`): which images each node
keeps for later leases, bounded by `diskimage-cache-size`, with least-recently-used eviction.

An image that arrives on a node for some leases is also kept in that node's cache, if it fits once unused images
are evicted (the one last used longest ago first). A lease booked on a node whose cache holds its image needs no
transfer: it pins the image there until its VMs start (they then run from their own copy), and a pinned image is
never evicted. Every stay of an image in a cache is remembered as a span, for the schedule file and its checker.
Pure bookkeeping: times are passed in.
"""
from __future__ import annotations

from dataclasses import dataclass, field


NOWHERE: frozenset = frozenset()     # where an image no cache holds is


@dataclass
class Entry:
    image: str
    size: int                  # MB
    since: int                 # when it entered the cache
    last_use: int              # when the last lease using it ends (or ended): the LRU order
    pins: set = field(default_factory=set)   # (lease id, vnode) booked to start from this copy


@dataclass(frozen=True)
class Span:
    """An image's stay in one node's cache: [start, end), end None while it is still there."""
    node: int
    image: str
    size: int
    start: int
    end: int | None


class NodeCache:
    def __init__(self, node: int, capacity: int | None, where: dict[str, set] | None = None) -> None:
        self.node = node
        self.capacity = capacity          # MB; None: unbounded
        self.entries: dict[str, Entry] = {}
        self.closed: list[Span] = []      # spans of images already evicted
        self.where = where if where is not None else {}   # image -> nodes whose caches hold it (shared)

    def used(self) -> int:
        return sum(e.size for e in self.entries.values())

    def has(self, image: str) -> bool:
        return image in self.entries

    def pin(self, image: str, key: tuple[int, int], until: int) -> None:
        entry = self.entries[image]
        entry.pins.add(key)
        entry.last_use = max(entry.last_use, until)

    def unpin(self, image: str, key: tuple[int, int]) -> None:
        entry = self.entries.get(image)
        if entry is not None:
            entry.pins.discard(key)

    def admit(self, image: str, size: int, now: int, last_use: int) -> bool:
        """An image arrived on the node at `now`: keep it if it fits once unpinned images are evicted, least
        recently used first. Whether it is (now) in the cache."""
        entry = self.entries.get(image)
        if entry is not None:
            entry.last_use = max(entry.last_use, last_use)
            return True
        if self.capacity is not None:
            if size > self.capacity:
                return False
            free = self.capacity - self.used()
            victims = sorted((e for e in self.entries.values() if not e.pins), key=lambda e: (e.last_use, e.image))
            if free + sum(e.size for e in victims) < size:
                return False      # evicting everything unpinned would not make room: evict nothing
            for victim in victims:
                if free >= size:
                    break
                self.evict(victim.image, now)
                free += victim.size
        self.entries[image] = Entry(image, size, now, last_use)
        self.where.setdefault(image, set()).add(self.node)
        return True

    def evict(self, image: str, now: int) -> None:
        entry = self.entries.pop(image)
        self.where[image].discard(self.node)
        self.closed.append(Span(self.node, image, entry.size, entry.since, now))

    def spans(self) -> list[Span]:
        return self.closed + [Span(self.node, e.image, e.size, e.since, None) for e in self.entries.values()]


class ImageCaches:
    """One cache per node, with the counts the run's figures report."""

    def __init__(self, nodes, capacity: int | None) -> None:
        self.capacity = capacity
        self.where: dict[str, set] = {}     # image -> nodes whose caches hold it
        self.nodes: dict[int, NodeCache] = {n: NodeCache(n, capacity, self.where) for n in nodes}
        self.hits = 0       # VMs booked to start from a cached image
        self.misses = 0     # VMs whose image had to be transferred (or came with another lease's transfer)

    def pin_all(self, lease_id: int, image: str, hits: dict[int, int], until: int) -> None:
        """`NodeCache.pin` of the image for each of the lease's VMs `hits` (vnode -> node) books from a cache."""
        nodes = self.nodes
        for vnode, pnode in hits.items():
            entry = nodes[pnode].entries[image]
            entry.pins.add((lease_id, vnode))
            if until > entry.last_use:
                entry.last_use = until

    def unpin_all(self, lease_id: int, pins) -> None:
        """`NodeCache.unpin` for each (node, image, vnode) of the lease's pins, in one pass."""
        nodes = self.nodes
        for pnode, image, vnode in pins:
            entry = nodes[pnode].entries.get(image)
            if entry is not None:
                entry.pins.discard((lease_id, vnode))

    def holding(self, image: str) -> set[int] | frozenset:
        """The nodes whose caches hold the image (the cache's own set: not to be changed)."""
        return self.where.get(image, NOWHERE)

    def spans(self) -> list[Span]:
        return [span for cache in self.nodes.values() for span in cache.spans()]
