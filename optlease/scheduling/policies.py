"""Pluggable policies, one small protocol per decision, picked by name or dotted path (Haizea's chapter 9).

Admission decides whether a request may be scheduled at all; preemptability scores how willingly a lease gives way
(-1: never); host selection scores nodes (higher first). A refusal is a result with a reason, never an exception.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Protocol

from optlease.domain.lease import LeaseKind, LeaseState
from optlease.formats.config import policy_loader
from optlease.scheduling.nodeclasses import all_alike
from optlease.scheduling.records import Lease
from optlease.scheduling.slottable import SlotTable

AGING_HORIZON = 7 * 86400  # leases older than this are never preempted (Haizea's hard-coded seven days)


class AdmissionPolicy(Protocol):
    def accept(self, lease: Lease) -> str | None:
        """None to accept, or the reason for rejecting."""


class PreemptabilityPolicy(Protocol):
    def score(self, preemptor: Lease, preemptee: Lease, time: int) -> float:
        """How preemptable `preemptee` is by `preemptor` at `time`: -1 = not at all, higher = sooner."""


class HostSelectionPolicy(Protocol):
    def score(self, node: int, time: int, lease: Lease, table: SlotTable) -> float:
        """How good `node` is for `lease` starting at `time` (higher first)."""


class AcceptAll:
    def accept(self, lease: Lease) -> str | None:
        return None


class NoARs:
    def accept(self, lease: Lease) -> str | None:
        return "advance reservations are not accepted (policy-admission: no-ARs)" if lease.kind is LeaseKind.AR \
            else None


class NoPreemption:
    def score(self, preemptor: Lease, preemptee: Lease, time: int) -> float:
        return -1


class ARPreemptsEverything:
    """ARs may preempt preemptible best-effort leases; younger leases give way first (aging)."""

    def score(self, preemptor: Lease, preemptee: Lease, time: int) -> float:
        if preemptor.kind is not LeaseKind.AR or preemptee.kind is not LeaseKind.BEST_EFFORT:
            return -1
        if not preemptee.req.preemptible and preemptee.state is not LeaseState.SCHEDULED:
            return -1   # a booking not yet begun gives way by going back to the queue (Haizea): it never ran
        age = time - preemptee.req.arrival
        if age >= AGING_HORIZON:   # too old to give way
            return -1
        return (AGING_HORIZON - age) / AGING_HORIZON


class NoPolicy:
    empty_nodes_alike = True

    def score(self, node: int, time: int, lease: Lease, table: SlotTable) -> float:
        return 0.0


class GreedyHosts:
    """Prefer nodes with fewer leases to preempt, then nodes whose capacity stays unchanged the longest."""

    HORIZON = 4
    # A node with nothing booked has no lease to preempt and never changes: every such node scores the same.
    empty_nodes_alike = True

    def score(self, node: int, time: int, lease: Lease, table: SlotTable) -> float:
        in_node = min(table.count_leases_at(node, time), self.HORIZON)
        few_leases = 1 - in_node / self.HORIZON
        change = table.profiles[node].next_change(time)
        if change is None or change - time >= lease.req.duration:
            stable = 1.0
        else:
            stable = (change - time) / lease.req.duration
        return 0.5 * few_leases + 0.25 * 1.0 + 0.25 * stable

    def _leases_at(self, rrs, time: int) -> int:
        """How many leases (at most HORIZON) have a reservation among `rrs` at `time`: most often one lease (its VM
        and its shutdown)."""
        first, in_node = None, 0
        for rr in rrs:
            if rr.start <= time < rr.end:
                if first is None:
                    first, in_node = rr.lease, 1
                elif rr.lease is not first:
                    return min(len({rr.lease.id for rr in rrs if rr.start <= time < rr.end}), self.HORIZON)
        return in_node

    def score_groups(self, groups, time: int, lease: Lease, table: SlotTable) -> dict[float, list]:
        """-score -> the collections of nodes that score so, for the nodes of (profile, nodes) groups, as `score`
        gives them: the profile's next change is looked up once, and the leases there counted once for the nodes
        whose reservations are the same (nodes that share a profile most often hold the same ones)."""
        horizon, duration = self.HORIZON, lease.req.duration
        by_node, alike = table.by_node, table.alike
        out: dict[float, list] = {}
        for prof, nodes in groups:
            pt = prof.t
            i = bisect_right(pt, time)
            if i == len(pt) or pt[i] - time >= duration:
                stable = 1.0
            else:
                stable = (pt[i] - time) / duration
            ref = by_node[next(iter(nodes))]
            if len(nodes) > 1:
                same = alike.get(prof)
                if same is None:
                    # (nodes booked together share one set)
                    same = alike[prof] = all_alike(list(map(by_node.__getitem__, nodes)), ref)
            else:
                same = True
            if not same:
                for score, node in self.score_many(nodes, time, lease, table):
                    out.setdefault(-score, []).append((node,))
                continue
            in_node = self._leases_at(ref, time) if ref else 0
            few_leases = 1 - in_node / horizon
            score = 0.5 * few_leases + 0.25 * 1.0 + 0.25 * stable
            out.setdefault(-score, []).append(nodes)
        return out

    def score_many(self, nodes, time: int, lease: Lease, table: SlotTable, ranked: bool = False) -> list[tuple]:
        """(score, node) for each node, as `score` gives it, with its lookups inlined: the mapper scores every busy
        node with room at each placement. `ranked`: (-score, the node's rank in the site, node) instead."""
        horizon, duration = self.HORIZON, lease.req.duration
        by_node, profiles, rank = table.by_node, table.profiles, table.rank
        out = []
        for node in nodes:
            rrs = by_node[node]
            if not rrs:
                in_node = 0
            elif len(rrs) == 1:
                rr = next(iter(rrs))
                in_node = 1 if rr.start <= time < rr.end else 0
            else:
                in_node = self._leases_at(rrs, time)
            few_leases = 1 - in_node / horizon
            pt = profiles[node].t
            i = bisect_right(pt, time)
            if i == len(pt) or pt[i] - time >= duration:
                stable = 1.0
            else:
                stable = (pt[i] - time) / duration
            score = 0.5 * few_leases + 0.25 * 1.0 + 0.25 * stable
            out.append((-score, rank[node], node) if ranked else (score, node))
        return out


ADMISSION = {"accept-all": AcceptAll, "no-ARs": NoARs}
PREEMPTION = {"no-preemption": NoPreemption, "ar-preempts-everything": ARPreemptsEverything}
HOST_SELECTION = {"no-policy": NoPolicy, "greedy": GreedyHosts}


class Policies:
    """The three policies of a run, built once by the driver."""

    def __init__(self, admission: str = "accept-all", preemption: str = "no-preemption",
                 host_selection: str = "greedy") -> None:
        self.admission: AdmissionPolicy = policy_loader(admission, ADMISSION, "policy-admission")()
        self.preemption: PreemptabilityPolicy = policy_loader(preemption, PREEMPTION, "policy-preemption")()
        self.hosts: HostSelectionPolicy = policy_loader(host_selection, HOST_SELECTION, "policy-host-selection")()
        self.preemption_enabled = preemption != "no-preemption"
        # Whether the host policy gives every node with nothing booked one score (the mapper then need not ask it
        # about each idle node); a policy of the user's says so with the same attribute.
        self.empty_nodes_alike = getattr(self.hosts, "empty_nodes_alike", False) is True
        # a built-in host policy: its scores at an instant depend on the table from that instant on alone
        self.builtin_hosts = type(self.hosts) in (GreedyHosts, NoPolicy)
        # the nodes' order may change from one instant to the next with nothing booked or freed (the greedy policy
        # scores how long a node's capacity stays unchanged, up to the lease's run: a node's score falls as its next
        # change comes near, and another's, capped, does not)
        self.order_moves_with_time = type(self.hosts) is not NoPolicy

    def sort_hosts(self, nodes: list[int], time: int, lease: Lease, table: SlotTable) -> list[int]:
        if isinstance(self.hosts, NoPolicy):
            return nodes
        # Stable: equal scores keep node order.
        return [n for _, n in sorted(self.score_hosts(nodes, time, lease, table), key=lambda sn: -sn[0])]

    def score_hosts(self, nodes: list[int], time: int, lease: Lease, table: SlotTable) -> list[tuple[float, int]]:
        """(score, node) for each node, in the given order."""
        if type(self.hosts) is GreedyHosts:
            return self.hosts.score_many(nodes, time, lease, table)
        score = self.hosts.score
        return [(score(n, time, lease, table), n) for n in nodes]

    def keyed_groups(self, groups, time: int, lease: Lease, table: SlotTable) -> dict[float, list]:
        """The nodes of (profile, nodes) groups (SlotTable.busy_groups) by -score: -score -> collections of
        nodes."""
        if type(self.hosts) is GreedyHosts:
            return self.hosts.score_groups(groups, time, lease, table)
        out: dict[float, list] = {}
        for score, node in self.score_hosts([n for _, nodes in groups for n in nodes], time, lease, table):
            out.setdefault(-score, []).append((node,))
        return out

    def ranked_hosts(self, nodes, time: int, lease: Lease, table: SlotTable) -> list[tuple[float, int, int]]:
        """(-score, rank in the site, node) for each node: sorted, the host policy's order (equal scores in node
        order)."""
        if type(self.hosts) is GreedyHosts:
            return self.hosts.score_many(nodes, time, lease, table, ranked=True)
        rank = table.rank
        return [(-score, rank[n], n) for score, n in self.score_hosts(nodes, time, lease, table)]

    def sort_preemptees(self, preemptor: Lease, leases: list[Lease], time: int) -> list[Lease]:
        scored = [(self.preemption.score(preemptor, lease, time), lease) for lease in leases]
        return [lease for s, lease in sorted(scored, key=lambda sl: -sl[0]) if s >= 0]
