"""What the driver asks of enactment: the Enactor protocol, and the tasks and outcomes that cross it.

A task names one VM by its stable name (`lease-<id>-vm-<vnode>`); the driver turns its plan into tasks through the
pure reconcile step and hands them to an Enactor; outcomes come back later (simulated enactment answers at once).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

START, STOP, SUSPEND, RESUME, MIGRATE = "start", "stop", "suspend", "resume", "migrate"


def vm_name(lease_id: int, vnode: int) -> str:
    return f"lease-{lease_id}-vm-{vnode}"


_VM_NAME = re.compile(r"lease-(-?[0-9]+)-vm-([0-9]+)")


def parse_vm_name(name: str) -> tuple[int, int] | None:
    """(lease id, vnode) of an optlease VM name; None for a VM optlease did not name."""
    match = _VM_NAME.fullmatch(name) if isinstance(name, str) else None
    return (int(match.group(1)), int(match.group(2))) if match else None


@dataclass(frozen=True)
class VmTask:
    """One VM operation on one host. `destination` only for migrate; `memory_mb`/`vcpus` only for start."""

    kind: str
    lease_id: int
    vnode: int
    host: str
    destination: str | None = None
    memory_mb: int = 0
    vcpus: int = 1
    migration_type: str = "warm"       # live | warm | offline (cold)
    id: str = ""                       # filled by the enactor (a fresh id each time)
    wave: int = 0                      # the reconcile step's wave: it starts when wave - 1 has succeeded
    swap_with: str | None = None       # migrate only: the VM on the destination that comes back (same size)
    force: bool = False                # stop only: destroy instead of a clean shutdown (a suspended VM)

    @property
    def vm(self) -> str:
        return vm_name(self.lease_id, self.vnode)


@dataclass(frozen=True)
class TaskOutcome:
    task: VmTask
    ok: bool
    details: str = ""
    timed_out: bool = False
    skipped: bool = False              # never sent: an earlier wave of its batch failed


@dataclass
class HostInfo:
    name: str
    capacity: dict[str, int] = field(default_factory=dict)
    alive: bool = True
    last_seen: float = 0.0


class Reported(dict):
    """What the hosts report, vm -> (host, state), that remembers which VMs changed since `take_changes`: an
    enactment pass looks at those, not at every VM of the site (100,000 of them are compared in no pass)."""

    def __init__(self) -> None:
        super().__init__()
        self.changed: set[str] = set()

    def __setitem__(self, vm: str, where: tuple[str, str]) -> None:
        if self.get(vm) != where:
            self.changed.add(vm)
        super().__setitem__(vm, where)

    def __delitem__(self, vm: str) -> None:
        super().__delitem__(vm)
        self.changed.add(vm)

    def pop(self, vm: str, *default):
        if vm in self:
            self.changed.add(vm)
        return super().pop(vm, *default)

    # every other way of changing a dict is tracked too: a daemon's copy built from the changes must not go stale
    def update(self, *args, **kwargs) -> None:
        for vm, where in dict(*args, **kwargs).items():
            self[vm] = where

    def setdefault(self, vm: str, default=None):
        if vm not in self:
            self[vm] = default
        return self[vm]

    def popitem(self):
        vm, where = super().popitem()
        self.changed.add(vm)
        return vm, where

    def clear(self) -> None:
        self.changed.update(self)
        super().clear()

    def __ior__(self, other):
        self.update(other)
        return self

    def take_changes(self) -> set[str]:
        out, self.changed = self.changed, set()
        return out

    def take_delta(self) -> dict[str, tuple[str, str] | None]:
        """The VMs whose report changed since the last take, each with its report now (None: no host reports it)."""
        return {vm: self.get(vm) for vm in self.take_changes()}


class Enactor(Protocol):
    def submit(self, tasks: list[VmTask]) -> None:
        """Send tasks (in the given order; the reconcile step has ordered them)."""

    def outcomes(self) -> list[TaskOutcome]:
        """Outcomes that arrived since the last call (results, errors, timeouts)."""

    def hosts(self) -> dict[str, HostInfo]:
        """The hosts known to enactment and whether they are alive."""

    def running(self) -> dict[str, tuple[str, str]]:
        """What the hosts report: vm name -> (host, state) with state running | paused | shut-off | saved."""

    # optional: `running_changes() -> set[str]`, the VMs whose report changed since the last call (a `Reported`);
    # `running_delta() -> dict`, the same VMs with their report now (vm -> (host, state), None: gone), which the
    # daemon applies to its own copy instead of copying `running()` at every pass; `hosts_version() -> int`, a
    # number that changes whenever a host appears or its `alive` or `capacity` changes, so that the daemon reads
    # `hosts()` again only then. Each is trusted only from the class that defines `running()` (`hosts()`) too.

    def close(self) -> None:
        """Release connections."""
