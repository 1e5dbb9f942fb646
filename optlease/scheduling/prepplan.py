"""Lease preparation's options (`[general] lease-preparation`, `[deploy-imagetransfer]`) and the records a plan of
it is made of: when each node could have a lease's image and how, and how one booking gets its images
(scheduling.preparation makes them). Pure data."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from optlease.scheduling.imagelink import Transfer
from optlease.scheduling.records import Lease

__all__ = ["BY_TRANSFER", "FROM_CACHE", "PIGGYBACK", "PreparationOptions", "Earliest", "Ready", "Plan"]

# How a node gets a lease's image (Haizea's kinds of earliest starting time).
BY_TRANSFER, FROM_CACHE, PIGGYBACK = "transfer", "cache", "piggyback"


@dataclass(frozen=True)
class PreparationOptions:
    """`[general] lease-preparation`, `[simulation] imagetransfer-bandwidth` and `[deploy-imagetransfer]`."""
    mode: str = "unmanaged"              # unmanaged | imagetransfer
    bandwidth: int = 100                 # Mbit/s of the repository's link
    mechanism: str = "unicast"           # unicast | multicast
    avoid_redundant: bool = True
    force_time: int | None = None        # seconds every transfer of one image takes, whatever its size
    reuse: str = "none"                  # none | image-caches
    cache_size: int | None = None        # MB per node; None: unbounded

    @property
    def managed(self) -> bool:
        return self.mode == "imagetransfer"

    @classmethod
    def from_config(cls, cfg) -> "PreparationOptions":
        g = lambda opt: cfg.get("deploy-imagetransfer", opt)  # noqa: E731
        return cls(mode=cfg.get("general", "lease-preparation"),
                   bandwidth=cfg.get("simulation", "imagetransfer-bandwidth") or 100,
                   mechanism=g("transfer-mechanism"), avoid_redundant=g("avoid-redundant-transfers"),
                   force_time=g("force-imagetransfer-time"), reuse=g("diskimage-reuse"),
                   cache_size=g("diskimage-cache-size"))


class Earliest(NamedTuple):
    """When each node could have a lease's image (`times`), the start of the transfer of its own it would book,
    and how the nodes that need no such transfer get it (`how`)."""
    times: dict[int, int]
    start: int
    how: dict


class Ready(NamedTuple):
    """When a node can have a lease's image, and how: `start` of the transfer to book, or the transfer `on` which
    it would come."""
    time: int
    how: str
    start: int | None = None
    on: Transfer | None = None


@dataclass
class Plan:
    """How one booking gets its images: cache hits, rides on booked transfers, and a transfer of its own."""
    lease: Lease
    hits: dict[int, int] = field(default_factory=dict)                 # vnode -> node
    rides: dict[int, tuple[int, Transfer]] = field(default_factory=dict)  # vnode -> (node, transfer)
    own: dict[int, int] = field(default_factory=dict)                  # vnode -> node
    start: int = 0
    end: int = 0
