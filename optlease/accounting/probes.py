"""The built-in accounting probes (the manual's Appendix D, with the names Haizea's probes give their data) and how
`[accounting] probes` names them: a short name or the dotted path of a probe class of the user's own."""
from __future__ import annotations

import importlib
from typing import Any, Callable

from optlease.accounting.collection import AccountingDataCollection as ADC, AccountingProbe, ProbeError
from optlease.accounting.metrics import bounded_slowdown
from optlease.domain.lease import LeaseKind, LeaseState

S = LeaseState
HELD_ON_DISK = (S.SUSPENDED_PENDING, S.SUSPENDED_QUEUED, S.SUSPENDED_SCHEDULED, S.MIGRATING)


class _AdmissionProbe(AccountingProbe):
    """Accepted and rejected leases of one kind. Counted once each: accepted when the instant it was requested at
    has been scheduled and it was not rejected, rejected when it is done as rejected (Haizea counts an AR that its
    admission policy accepts and its scheduler then rejects in both counters)."""
    KIND: LeaseKind
    LABEL: str

    def __init__(self, accounting: ADC) -> None:
        super().__init__(accounting)
        self.accepted, self.rejected = f"Accepted {self.LABEL}", f"Rejected {self.LABEL}"
        for counter in (self.accepted, self.rejected):
            accounting.create_counter(counter, ADC.AVERAGE_NONE)
            accounting.create_stat(f"Total {counter[0].lower()}{counter[1:]}")

    def finalize_accounting(self) -> None:
        for counter in (self.accepted, self.rejected):
            self._set_stat_from_counter(f"Total {counter[0].lower()}{counter[1:]}", counter)

    def at_lease_request(self, lease: Any) -> None:
        if lease.kind is self.KIND and lease.state is not S.REJECTED:
            self.accounting.incr_counter(self.accepted, lease.id)

    def at_lease_done(self, lease: Any) -> None:
        if lease.kind is self.KIND and lease.state is S.REJECTED:
            self.accounting.incr_counter(self.rejected, lease.id)


class ARProbe(_AdmissionProbe):
    """Counters "Accepted AR", "Rejected AR"; per-run "Total accepted AR", "Total rejected AR"."""
    KIND, LABEL = LeaseKind.AR, "AR"


class IMProbe(_AdmissionProbe):
    """Counters "Accepted Immediate", "Rejected Immediate"; per-run "Total accepted Immediate", "Total rejected
    Immediate"."""
    KIND, LABEL = LeaseKind.IMMEDIATE, "Immediate"


class BEProbe(AccountingProbe):
    """Counters "Best-effort completed" and "Queue size" (time-weighted average); per-lease "Waiting time" and
    "Slowdown" (bounded at 10 s) of completed best-effort leases; per-run "Total best-effort completed" and
    "all-best-effort" (when the last one completed, in seconds from the start; 0 when none did)."""

    def __init__(self, accounting: ADC) -> None:
        super().__init__(accounting)
        accounting.create_counter("Best-effort completed", ADC.AVERAGE_NONE)
        accounting.create_counter("Queue size", ADC.AVERAGE_TIMEWEIGHTED)
        accounting.create_lease_stat("Waiting time")
        accounting.create_lease_stat("Slowdown")
        accounting.create_stat("Total best-effort completed")
        accounting.create_stat("all-best-effort")

    def finalize_accounting(self) -> None:
        self._set_stat_from_counter("Total best-effort completed", "Best-effort completed")
        # when the count reached its final value: the last completion. (Haizea takes the counter's last row, which
        # the run's end adds, so its figure is when the run ended, later than that when an AR ran on.)
        rows = self.accounting.counters["Best-effort completed"]
        self.accounting.set_stat("all-best-effort", min(t for t, v, _ in rows if v == rows[-1][1]))

    def at_timestep(self, lease_scheduler: Any) -> None:
        self.accounting.append_to_counter("Queue size", len(lease_scheduler.queue))

    def at_lease_done(self, lease: Any) -> None:
        if lease.kind is LeaseKind.BEST_EFFORT and lease.state is S.DONE:
            self.accounting.set_lease_stat("Waiting time", lease.id, lease.first_start - lease.req.arrival)
            self.accounting.set_lease_stat("Slowdown", lease.id, bounded_slowdown(lease))
            self.accounting.incr_counter("Best-effort completed", lease.id)


class LeaseProbe(AccountingProbe):
    """Counters "Requested leases", "Completed leases", "Rejected leases" and the per-run totals of each."""
    COUNTERS = ("Requested leases", "Completed leases", "Rejected leases")

    def __init__(self, accounting: ADC) -> None:
        super().__init__(accounting)
        for counter in self.COUNTERS:
            accounting.create_counter(counter, ADC.AVERAGE_NONE)
            accounting.create_stat(f"Total {counter[0].lower()}{counter[1:]}")

    def finalize_accounting(self) -> None:
        for counter in self.COUNTERS:
            self._set_stat_from_counter(f"Total {counter[0].lower()}{counter[1:]}", counter)

    def at_lease_request(self, lease: Any) -> None:
        self.accounting.incr_counter("Requested leases", lease.id)

    def at_lease_done(self, lease: Any) -> None:
        if lease.state is S.REJECTED:
            self.accounting.incr_counter("Rejected leases", lease.id)
        elif lease.state is S.DONE:
            self.accounting.incr_counter("Completed leases", lease.id)


def site_cpu(site: Any) -> tuple[int, int]:
    """(index of CPU in the site's usage vectors, the site's total CPU)."""
    return site.resource_types.index("CPU"), sum(site.capacity(n).get("CPU", 0) for n in site.node_ids)


def cpu_in_use(lease_scheduler: Any, now: int, cpu: int, total: int, held_by: dict | None = None) -> float:
    """The share (0-1) of the site's CPU that running VMs hold at `now`; suspensions, resumptions and migrations
    count as idle, as in Haizea. `cpu`, `total`: site_cpu(site); `held_by`: the CPU each VM reservation holds, as
    found so far (kept by the caller from one instant to the next: a reservation's demand never changes)."""
    use = getattr(lease_scheduler, "running_use", None)
    if use is not None:
        # optlease's scheduler keeps the sum of what its running VM reservations hold, as VMs start and stop
        return use[cpu] / total if total else 0.0
    # another scheduler: the leases whose VMs run, when it keeps them apart, else every lease in the system
    leases = getattr(lease_scheduler, "running", None)
    if leases is None:
        leases = lease_scheduler.leases
    return cpu_held(leases.values(), now, cpu, {} if held_by is None else held_by) / total if total else 0.0


def cpu_held(leases: Any, now: int, cpu: int, held_by: dict) -> int:
    """The CPU the VM reservations of `leases` that run at `now` hold together (`held_by` as in cpu_in_use)."""
    used = 0
    active = S.ACTIVE
    for lease in leases:
        if lease.state is active:   # the cheap test first: most leases in the system wait
            vmrrs = lease.vmrrs
            if vmrrs:
                vmrr = vmrrs[-1]
                if vmrr.state == "active" and vmrr.start <= now < vmrr.end:
                    held = held_by.get(vmrr)
                    if held is None:
                        held = vmrr.total()   # the lease's VMs summed once, not one node at a time
                        held = held_by[vmrr] = 0 if held is None else held[cpu]
                    used += held
    return used


class CPUUtilizationProbe(AccountingProbe):
    """Counter "CPU utilization" (0-1, time-weighted average): the share of the site's CPU running VMs."""

    def __init__(self, accounting: ADC) -> None:
        super().__init__(accounting)
        accounting.create_counter("CPU utilization", ADC.AVERAGE_TIMEWEIGHTED)
        self._site: tuple[int, int] | None = None
        self._held: dict = {}    # VM reservation -> the CPU it holds (`cpu_in_use`)

    def at_timestep(self, lease_scheduler: Any) -> None:
        if self._site is None:
            self._site = site_cpu(lease_scheduler.site)
        if len(self._held) > 4096:
            self._held.clear()      # (reservations that ended stay in it until then)
        self.accounting.append_to_counter("CPU utilization",
                                          cpu_in_use(lease_scheduler, self.accounting.now, *self._site, self._held))


class DiskUsageProbe(AccountingProbe):
    """Counter "Disk usage": the most disk (MB) any node uses. optlease prepares no disk images (lease-preparation
    unmanaged), so what a node holds on disk is the memory images of the suspended leases whose VMs are there."""

    def __init__(self, accounting: ADC) -> None:
        super().__init__(accounting)
        accounting.create_counter("Disk usage", ADC.AVERAGE_NONE)

    def at_timestep(self, lease_scheduler: Any) -> None:
        per_node: dict[int, int] = {}
        for lease in lease_scheduler.leases.values():
            if lease.state in HELD_ON_DISK and lease.image_nodes:
                for vnode, pnode in lease.image_nodes.items():
                    per_node[pnode] = per_node.get(pnode, 0) + lease.req.memory_of(vnode)
        self.accounting.append_to_counter("Disk usage", max(per_node.values(), default=0))


BUILTIN: dict[str, type[AccountingProbe]] = {
    "ar": ARProbe, "best-effort": BEProbe, "immediate": IMProbe, "lease": LeaseProbe,
    "cpu-utilization": CPUUtilizationProbe, "utilization": CPUUtilizationProbe, "disk-usage": DiskUsageProbe,
}
# Haizea's full names of its probes, so that a Haizea configuration naming them runs unchanged
HAIZEA_NAMES = {
    "haizea.pluggable.accounting.leases.ARProbe": "ar",
    "haizea.pluggable.accounting.leases.BEProbe": "best-effort",
    "haizea.pluggable.accounting.leases.IMProbe": "immediate",
    "haizea.pluggable.accounting.leases.LeaseProbe": "lease",
    "haizea.pluggable.accounting.utilization.CPUUtilizationProbe": "cpu-utilization",
    "haizea.pluggable.accounting.utilization.DiskUsageProbe": "disk-usage",
}


def probe_factory(name: str) -> Callable[[ADC], AccountingProbe]:
    """The probe class a `[accounting] probes` word names: a short name, Haizea's full name, or `module.Class`."""
    name = HAIZEA_NAMES.get(name, name)
    if name in BUILTIN:
        return BUILTIN[name]
    module_name, _, attr = name.rpartition(".")
    if not module_name:
        raise ProbeError(f"unknown probe {name!r} (built in: {' '.join(BUILTIN)}; or a dotted path "
                         "module.Class)", "[accounting] probes")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except Exception as exc:  # a user's module may fail in any way while it is imported
        raise ProbeError(f"cannot load probe {name!r} ({type(exc).__name__}: {str(exc)[:160]})",
                         "[accounting] probes") from None


def collection_for(names: list[str]) -> ADC:
    """A data collection with the probes `names` (each once, in the order given)."""
    accounting = ADC()
    for name in dict.fromkeys(names):
        accounting.add_probe(name, probe_factory(name))
    return accounting
