"""The physical site: resource types and nodes with their capacities."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from optlease.errors import InputError
from optlease.numbers import parse_whole

REQUIRED_TYPES = ("CPU", "Memory")
MAX_NODES = 100_000          # a site of this size loads in about a second; ten million exhausted the daemon
MAX_CAPACITY = 2**31 - 1     # per node and resource type, as for a lease's amounts


class SiteError(InputError):
    """A site description that cannot be used."""


@dataclass(frozen=True)
class Site:
    """`nodes[i]` is the capacity of physical node i+1 (resource type -> amount; a missing type means 0)."""

    resource_types: tuple[str, ...]
    nodes: tuple[dict[str, int], ...]
    # What a grid description says of node i+1 beyond its capacity (name, features, extensions, OS, ...), kept so
    # that it can be published again; scheduling never reads it. Empty for a site given by a resources string.
    details: tuple[dict, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        missing = [t for t in REQUIRED_TYPES if t not in self.resource_types]
        if missing:
            raise SiteError(f"site has no {' or '.join(missing)} resource type (both CPU and Memory are required)")
        if not self.nodes:
            raise SiteError("site has no nodes")
        for i, node in enumerate(self.nodes, start=1):
            for rtype, amount in node.items():
                if rtype not in self.resource_types:
                    raise SiteError(f"node {i}: resource type {rtype!r} is not one of the site's "
                                    f"types ({' '.join(self.resource_types)})")
                if amount < 0:
                    raise SiteError(f"node {i}: negative amount {amount} of {rtype}")

    @property
    def node_ids(self) -> range:
        return range(1, len(self.nodes) + 1)

    def capacity(self, node: int) -> dict[str, int]:
        return self.nodes[node - 1]

    @cached_property
    def largest(self) -> dict[str, int]:
        """The most of each resource type that one node has: a request for more fits nowhere (computed once, not
        for every request to a site of 10,000 nodes)."""
        return {rtype: max(node.get(rtype, 0) for node in self.nodes) for rtype in self.resource_types}

    @classmethod
    def homogeneous(cls, numnodes: int, capacity: dict[str, int]) -> "Site":
        types = tuple(capacity)
        return cls(types, tuple(dict(capacity) for _ in range(numnodes)))

    @classmethod
    def parse_resources(cls, text: str) -> "Site":
        """Haizea's `resources` string: `<numnodes> <type>:<amount>[,<type>:<amount>]*` (commas or spaces)."""
        parts = text.replace(",", " ").split()
        if not parts:
            raise SiteError("empty resources string")
        try:
            numnodes = parse_whole(parts[0], 1, MAX_NODES)
        except ValueError as exc:
            raise SiteError(f"resources must start with the number of nodes: {exc}") from None
        capacity: dict[str, int] = {}
        for item in parts[1:]:
            name, sep, amount = item.partition(":")
            if not sep or not name:
                raise SiteError(f"resource {item!r} is not of the form TYPE:AMOUNT")
            try:
                capacity[name] = parse_whole(amount, 1, MAX_CAPACITY)
            except ValueError as exc:
                raise SiteError(f"resource {name}: amount {exc}") from None
        return cls.homogeneous(numnodes, capacity)
