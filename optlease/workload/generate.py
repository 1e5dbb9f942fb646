"""Synthetic lease workloads: a site of node sets, and leases whose widths and run times follow Lublin and
Feitelson's model, at a chosen offered load, with shares of ARs (and their notice) and immediate leases, user
overestimates of run time and premature ends. Deterministic for a seed; pure (the caller writes the files)."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from optlease.domain.lease import LeaseKind, LeaseRequest
from optlease.domain.site import Site
from optlease.errors import InputError
from optlease.formats.lwf import Workload
from optlease.workload import lublin

MAX_NODES = 100_000
MAX_HORIZON = 366 * 86400
MAX_LOAD = 10.0


@dataclass(frozen=True)
class WorkloadSpec:
    """What to generate. Node sets are (count, capacity); each lease takes one VM shape of `vms` (drawn uniformly),
    as many VMs as the size model says. `load` is the offered load: the CPU time the leases really use over the site's
    CPU during `horizon` seconds (arrivals are spread over [0, horizon)). An AR starts `ar_notice` seconds (on
    average; uniform on [notice/2, 3 notice/2]) after it is requested. A share `premature_share` of the leases
    asks for up to `overestimate` times the time it really runs (uniform factor), and so ends early."""
    node_sets: tuple[tuple[int, dict[str, int]], ...]
    vms: tuple[dict[str, int], ...]
    load: float
    horizon: int
    ar_share: float = 0.0
    ar_notice: int = 3600
    immediate_share: float = 0.0
    overestimate: float = 1.0
    premature_share: float = 0.0
    preemptible: bool = True
    seed: int = 0
    max_leases: int = 100_000

    def check(self) -> None:
        """One line naming the option when a value is out of bounds."""
        def need(ok: bool, option: str, message: str) -> None:
            if not ok:
                raise InputError(message, option)

        need(0 < self.load <= MAX_LOAD, "--load", f"must be in (0, {MAX_LOAD:g}], not {self.load:g}")
        need(0 < self.horizon <= MAX_HORIZON, "--horizon", f"must be between 1 s and 366 days, not {self.horizon} s")
        need(0 <= self.ar_share <= 1, "--ar-share", f"must be in [0, 1], not {self.ar_share:g}")
        need(0 <= self.immediate_share <= 1, "--immediate-share", f"must be in [0, 1], not {self.immediate_share:g}")
        need(self.ar_share + self.immediate_share <= 1, "--ar-share", "--ar-share and --immediate-share add up to "
             "more than 1")
        need(0 < self.ar_notice <= MAX_HORIZON, "--ar-notice", f"must be between 1 s and 366 days, "
             f"not {self.ar_notice} s")
        need(1 <= self.overestimate <= 100, "--overestimate", f"must be in [1, 100], not {self.overestimate:g}")
        need(0 <= self.premature_share <= 1, "--premature-share", f"must be in [0, 1], not "
             f"{self.premature_share:g}")
        need(self.premature_share == 0 or self.overestimate > 1, "--premature-share", "leases end early only when "
             "users overestimate: give --overestimate above 1")
        need(sum(n for n, _ in self.node_sets) <= MAX_NODES, "--nodes", f"more than {MAX_NODES} nodes in all")
        need(bool(self.vms), "--vm", "no VM shape")
        need(0 < self.max_leases <= 1_000_000, "--max-leases", "must be between 1 and 1000000")


def build_site(node_sets: tuple[tuple[int, dict[str, int]], ...]) -> Site:
    types = tuple(dict.fromkeys(t for _, capacity in node_sets for t in capacity))
    return Site(types, tuple(dict(capacity) for count, capacity in node_sets for _ in range(count)))


def slots(site: Site, vm: dict[str, int]) -> int:
    """How many VMs of this shape the empty site holds."""
    return sum(min(site.capacity(n).get(t, 0) // amount for t, amount in vm.items() if amount > 0)
               for n in site.node_ids)


def work(request: LeaseRequest) -> int:
    """CPU-seconds the lease really uses."""
    return request.actual_duration * sum(vm.get("CPU", 0) for vm in request.vms)


def offered_load(requests: list[LeaseRequest], site: Site, horizon: int) -> float:
    cpu = sum(site.capacity(n).get("CPU", 0) for n in site.node_ids)
    return sum(work(r) for r in requests) / (cpu * horizon)


def generate(spec: WorkloadSpec) -> Workload:
    """The workload (with its <site>): leases are drawn until their work reaches the offered load, then given
    arrival times spread uniformly at random over the horizon (a Poisson process of that many arrivals)."""
    spec.check()
    site = build_site(spec.node_sets)
    shapes = []
    for vm in spec.vms:
        unknown = [t for t in vm if t not in site.resource_types]
        if unknown:
            raise InputError(f"resource type {unknown[0]!r} is on no node (node types: "
                             f"{' '.join(site.resource_types)})", "--vm")
        if vm.get("CPU", 0) <= 0:
            raise InputError("a VM needs CPU (the offered load is CPU time)", "--vm")
        largest = slots(site, vm)
        if largest == 0:
            raise InputError(f"a VM of {_shape(vm)} fits on no node", "--vm")
        shapes.append((vm, lublin.SizeModel(largest)))
    rng = random.Random(spec.seed)
    cpu = sum(site.capacity(n).get("CPU", 0) for n in site.node_ids)
    target, total = spec.load * cpu * spec.horizon, 0
    drawn: list[tuple[LeaseKind, tuple[dict[str, int], ...], int, int]] = []
    while total < target:
        if len(drawn) >= spec.max_leases:
            raise InputError(f"the workload would have more than {spec.max_leases} leases: lower --load or "
                             "--horizon, or raise --max-leases", "--load")
        vm, sizes = shapes[rng.randrange(len(shapes))]
        size = sizes.draw(rng)
        real = lublin.runtime(rng, size)
        requested = real
        if rng.random() < spec.premature_share:
            requested = math.ceil(real * rng.uniform(1.0, spec.overestimate))
        pick = rng.random()
        kind = LeaseKind.AR if pick < spec.ar_share else \
            LeaseKind.IMMEDIATE if pick < spec.ar_share + spec.immediate_share else LeaseKind.BEST_EFFORT
        drawn.append((kind, tuple(dict(vm) for _ in range(size)), real, requested))
        total += real * size * vm["CPU"]
    arrivals = sorted(rng.randrange(spec.horizon) for _ in drawn)
    requests = []
    for lease_id, ((kind, vms, real, requested), arrival) in enumerate(zip(drawn, arrivals), start=1):
        start = None
        if kind is LeaseKind.AR:
            start = arrival + max(1, round(rng.uniform(0.5, 1.5) * spec.ar_notice))
        requests.append(LeaseRequest(lease_id, kind, arrival, requested, vms,
                                     preemptible=spec.preemptible and kind is LeaseKind.BEST_EFFORT, start=start,
                                     real_duration=real if real < requested else None))
    return Workload(f"generated-seed-{spec.seed}", requests, site, describe(spec, requests, site))


def _shape(vm: dict[str, int]) -> str:
    return " ".join(f"{t}:{a}" for t, a in vm.items())


def describe(spec: WorkloadSpec, requests: list[LeaseRequest], site: Site) -> str:
    """The LWF's description: how it was made and what it holds, so that the file documents itself."""
    kinds = {k: sum(1 for r in requests if r.kind is k) for k in LeaseKind}
    sets = ", ".join(f"{n} x {_shape(c)}" for n, c in spec.node_sets)
    return (f"Generated by optlease generate-workload (Lublin-Feitelson 2003 widths and run times), seed "
            f"{spec.seed}. Site: {sets}. VMs: {'; '.join(_shape(v) for v in spec.vms)}. Offered load "
            f"{offered_load(requests, site, spec.horizon):.4f} of the CPU over {spec.horizon} s (asked "
            f"{spec.load:g}). {len(requests)} leases: {kinds[LeaseKind.BEST_EFFORT]} best-effort, "
            f"{kinds[LeaseKind.AR]} AR (notice {spec.ar_notice} s on average), {kinds[LeaseKind.IMMEDIATE]} "
            f"immediate; {sum(1 for r in requests if r.real_duration is not None)} end before their requested "
            f"time (overestimate up to {spec.overestimate:g}x).")


def configuration(tracefile: str) -> str:
    """A configuration that simulates a generated workload on its own site (resources: in-tracefile), with
    Haizea's quickstart scheduling: aggressive backfilling, ARs preempting best-effort leases by suspension."""
    from optlease.formats.config import render_config

    return render_config({
        "general": {"loglevel": "STATUS", "mode": "simulated", "lease-preparation": "unmanaged"},
        "simulation": {"clock": "simulated", "starttime": "2006-11-25 00:00:00", "resources": "in-tracefile",
                       "imagetransfer-bandwidth": 100},
        "scheduling": {"mapper": "greedy", "policy-admission": "accept-all",
                       "policy-preemption": "ar-preempts-everything", "policy-host-selection": "greedy",
                       "backfilling": "aggressive", "suspension": "all", "suspend-rate": 32, "resume-rate": 32,
                       "migration": "yes"},
        "accounting": {"probes": "ar best-effort immediate cpu-utilization"},
        "tracefile": {"tracefile": tracefile},
    })
