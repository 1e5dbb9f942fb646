"""The slot formulation of the offline round (cpsat/slots.py) states the same problem as the per-node round model:
on random slot sites both prove the same optimum, and the slot plan's node assignment never overfills a node."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from optlease.domain.lease import LeaseKind, LeaseRequest
from optlease.domain.site import Site
from optlease.scheduling.cpsat.slots import slots_per_node, solve_slots
from optlease.scheduling.cpsat.solve import SolveOptions, solve_round
from optlease.scheduling.snapshot import LeaseSnapshot, Outcome, Phase, RoundSnapshot

OPTIONS = SolveOptions(workers=1, time_limit=20)
SEEDS = list(range(40))


def offline_round(seed: int) -> tuple[RoundSnapshot, int]:
    """2-4 alike nodes holding 1 or 2 VMs each; 3-7 leases (best-effort with arrivals, ARs, one immediate)."""
    rng = random.Random(seed)
    per_node = 1 + seed % 2
    site = Site.homogeneous(rng.randint(2, 4), {"CPU": 100, "Memory": 1024 * per_node})
    vm = {"CPU": 100 // per_node, "Memory": 1024}
    leases = []
    for lease_id in range(1, rng.randint(3, 7) + 1):
        kind = rng.choice([LeaseKind.BEST_EFFORT] * 3 + [LeaseKind.AR, LeaseKind.IMMEDIATE])
        arrival = rng.randint(0, 8)
        vms = tuple(dict(vm) for _ in range(rng.randint(1, per_node * len(site.node_ids))))
        start = arrival + rng.randint(1, 6) if kind is LeaseKind.AR else None
        req = LeaseRequest(lease_id, kind, arrival, rng.randint(2, 9), vms, start=start)
        phase = Phase.QUEUED if kind is LeaseKind.BEST_EFFORT else Phase.NEW
        leases.append(LeaseSnapshot(req, phase, release=arrival))
    return RoundSnapshot(0, site, tuple(leases)), per_node


@pytest.mark.parametrize("seed", SEEDS, ids=[f"offline-{s}" for s in SEEDS])
def test_slot_and_node_models_agree_on_the_optimum(seed):
    snap, per_node = offline_round(seed)
    assert slots_per_node(snap) == per_node
    slots, nodes = solve_slots(snap, OPTIONS, None), solve_round(snap, OPTIONS)
    assert slots.stats.status == "OPTIMAL" and nodes.stats.status == "OPTIMAL"
    assert slots.stats.objective == nodes.stats.objective
    # the assignment: at every instant, no node holds more VMs than it has slots, and nothing starts early
    req = {lease.id: lease.request for lease in snap.leases}
    placed = [p for p in slots.leases if p.outcome is Outcome.ACCEPTED]
    for p in placed:
        assert p.start >= req[p.lease_id].arrival
        assert len(p.nodes) == req[p.lease_id].numnodes
    for t in {p.start for p in placed}:
        load = Counter(n for p in placed if p.start <= t < p.end for n in p.nodes)
        assert max(load.values()) <= per_node


def test_a_site_with_running_leases_or_mixed_demands_is_not_a_slot_site():
    snap, _ = offline_round(3)
    one = LeaseRequest(98, LeaseKind.BEST_EFFORT, 0, 5, (dict(snap.leases[0].request.vms[0]),))
    bigger = LeaseRequest(99, LeaseKind.BEST_EFFORT, 0, 5, ({"CPU": 100, "Memory": 512},))
    assert slots_per_node(RoundSnapshot(0, snap.site, (*snap.leases, LeaseSnapshot(bigger, Phase.QUEUED)))) is None
    running = LeaseSnapshot(one, Phase.RUNNING, nodes=(snap.site.node_ids[0],), since=0)
    assert slots_per_node(RoundSnapshot(0, snap.site, (running,))) is None
    with pytest.raises(ValueError):
        solve_slots(RoundSnapshot(0, snap.site, (running,)), OPTIONS, None)
