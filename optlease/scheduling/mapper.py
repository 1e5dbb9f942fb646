"""Haizea's greedy mapper: place a lease's VMs on nodes over [start, end), packing several VMs per node.

Nodes are tried in the host policy's order and each takes as many VMs as fit. Without a strict end the mapping
may end earlier than asked (the lease will then be suspended); with preemption allowed, one more preemptable
lease at a time is assumed gone until the lease fits.
"""
from __future__ import annotations

import heapq
import itertools

from optlease.scheduling.hostruns import Nodes, keyed_runs
from optlease.scheduling.hostscores import BusyScores, InOrder
from optlease.scheduling.nodeclasses import SPAN_LEAST, same_runs
from optlease.scheduling.policies import GreedyHosts, Policies
from optlease.scheduling.records import AlikeVMs, Lease, Placement
from optlease.scheduling.slottable import INF, SlotTable, fits, vadd, vms_per_node, vsub


class GreedyMapper:
    def __init__(self, table: SlotTable, policies: Policies) -> None:
        self.table = table
        self.policies = policies
        # the greedy policy's scores of the busy nodes, kept between mappings (other policies are asked each time)
        self.scores = BusyScores(table, policies) if type(policies.hosts) is GreedyHosts else None

    def map(self, lease: Lease, start: int, end: int, strictend: bool, onlynodes=None,
            allow_preemption: bool = False):
        """(mapping vnode->pnode, the end it holds until, leases to preempt), or (None, None, None)."""
        table = self.table
        demands = lease.demands
        # (VMs alike: vnodes 1..n as a range, not a list)
        vnodes = demands.keys() if type(demands) is AlikeVMs else sorted(demands)
        smallest = None if allow_preemption else vms_of(lease)[0]
        if onlynodes is None and self.policies.empty_nodes_alike:
            keyed = self._keyed(lease, start, smallest)
            if not allow_preemption and keyed is not None and self._cannot_hold(lease, keyed, smallest):
                return None, None, None
            pnodes = Cached(self._host_runs(lease, start, smallest, keyed))
        else:
            candidates = table.nodes if onlynodes is None else [n for n in table.nodes if n in onlynodes]
            if smallest is not None:
                candidates = table.nodes_with_room(smallest, start, candidates)
            pnodes = self.policies.sort_hosts(candidates, start, lease, table)
        preemptable = []
        if allow_preemption:
            preemptable = self.policies.sort_preemptees(lease, table.leases_between(start, end), start)
        preempting: list[Lease] = []
        while True:
            # With a strict end, the VMs need the whole of their usage free on the site as a whole over the window
            # (beside what the leases assumed gone leave): where it is not, no walk over the nodes can place them.
            if not strictend or self._room_without(preempting, start, end, lease.total_demand):
                mapping, maxend = self._try(lease, vnodes, demands, pnodes, start, end, strictend, preempting)
                if mapping is not None:
                    return mapping, maxend, preempting
            if not preemptable:
                return None, None, None
            preempting.append(preemptable.pop(0))

    def _room_without(self, leases: list[Lease], start: int, end: int, need) -> bool:
        """Whether the site as a whole has `need` free over [start, end) once the given leases' reservations are
        gone (a necessary condition for a placement; always true with nodes out of planning, whose usage the
        site-wide profile still counts)."""
        table = self.table
        if table.down or need is None:
            return True
        total = table.total
        if leases:
            ids = {lease.id for lease in leases}
            total = total.copy()
            for rr in table.reservations:
                if rr.lease.id in ids and rr.demand and rr.end > start:
                    total.add(rr.start, rr.end, rr.total(), -1)
        return total.fits_between(start, end, need, table.total_cap)

    def _hosts(self, lease: Lease, start: int, smallest):
        """The nodes in the host policy's order (where `smallest` fits at start; None: all), as `sort_hosts` gives
        them, but lazily and with no work per idle node: idle nodes all score alike, so they come in node order
        wherever their score falls among the busy nodes' (equal scores keep node order)."""
        for item in self._host_runs(lease, start, smallest):
            if isinstance(item, list):
                yield from item
            else:
                yield item

    def _keyed(self, lease: Lease, start: int, smallest) -> dict | None:
        """The busy nodes where `smallest` fits at start, by -score (Policies.keyed_groups), on a site whose nodes
        are all alike and in planning (None: it is not)."""
        if self.scores is not None:
            return self.scores.keyed(start, lease, smallest)
        groups = self.table.busy_groups(smallest, start)
        return None if groups is None else self.policies.keyed_groups(groups, start, lease, self.table)

    def _cannot_hold(self, lease: Lease, keyed: dict, smallest) -> bool:
        """Whether a walk over the nodes it would try (the idle ones, and the busy ones of `keyed`) must fail for a
        lease whose VMs ask alike: no node holds more of them than an empty node does, and these nodes could not
        hold them all even so (a lease waiting at the head of the queue, while the site's free room, spread over
        busy nodes, adds up to its need, is so refused without a walk over every idle node)."""
        shape = vms_of(lease)[1]
        cap = self.table.one_cap
        if shape is None:
            return False
        per = vms_per_node(cap, shape)
        if per is None:
            return False
        need = len(lease.demands)
        idle = len(self.table.idle.get(cap, ())) if smallest is None or fits(smallest, cap) else 0
        if idle * per >= need:      # (the idle nodes alone may hold them: most often)
            return False
        busy = sum(len(c.nodes) if type(c) is InOrder else len(c) for colls in keyed.values() for c in colls)
        return (idle + busy) * per < need

    def _host_runs(self, lease: Lease, start: int, smallest, keyed=False):
        """`_hosts`, with idle nodes that come one after another given as lists (runs) where the site's nodes are
        all alike: every node of a run has the empty profile and the same capacity, so it takes as many VMs as
        the first (GreedyMapper._try places them at once). `keyed`: `_keyed`'s answer, when already asked."""
        table, policies = self.table, self.policies
        if keyed is False:
            keyed = self._keyed(lease, start, smallest)
        if keyed is not None:
            yield from keyed_runs(table, policies, keyed, lease, start, smallest)
            return
        # the busy nodes in any order: sorting by (score, node order) fixes theirs
        busy = table.busy if smallest is None else table.nodes_with_room(smallest, start, table.busy)
        ranked = policies.ranked_hosts(busy, start, lease, table)
        ranked.sort()
        rank = table.rank
        idle = table.idle_nodes(smallest)
        first = next(idle, None)
        if first is None:
            yield from (n for *_, n in ranked)
            return
        if not ranked:   # no busy node with room: the idle nodes alone, in node order
            yield first
            yield from idle
            return
        key = -policies.score_hosts([first], start, lease, table)[0][0]
        idle_ranked = ((key, rank[n], n) for n in itertools.chain((first,), idle))
        for *_, n in heapq.merge(ranked, idle_ranked):
            yield n

    def _try(self, lease, vnodes, demands, pnodes, start, end, strictend, preempting):
        table = self.table
        # the pnode of each vnode placed so far, in vnode order (`placed[pos]` is vnodes[pos]'s): a list grows by
        # runs of nodes in one step, and becomes the mapping at the end (`_mapping`)
        placed: list[int] = []
        maxend = end
        pos = 0
        cur = vnodes[0]
        # fit tests already answered, by profile: nodes alike share one (SlotTable._change)
        answers: dict[tuple, bool] = {}
        # with VMs that ask alike: what a node takes, by (profile, end so far, capacity) (`_on_node`)
        taken: dict[tuple, tuple] = {}
        # the nodes where the leases assumed gone hold anything: elsewhere a node's usage from `start` on is its
        # profile's
        gone = table.nodes_of(preempting) if preempting else ()
        usage_without = table.usage_without(preempting, start) if preempting else None
        profiles = table.profiles
        # each node's usage from `start` on (a node where the leases assumed gone hold anything: without them), read
        # in C as the walk goes (a walk that fails goes over every node, for each lease assumed gone in turn)
        usages = profiles
        if gone:
            usages = list(profiles)
            for pnode in gone:
                usages[pnode] = usage_without(pnode)
        usage = usages.__getitem__
        # the VMs' one demand when they all ask alike: a run of idle nodes then takes them at once (no lease
        # assumed gone holds an idle node)
        shape = vms_of(lease, demands)[1]
        # every VM's demand where they are one vector and a count (no look-up per VM)
        one = demands.shape if type(demands) is AlikeVMs else None
        caps = table.caps
        for item in pnodes:
            kind = type(item)
            if kind is not list or shape is None:
                run = item if kind is list or kind is Nodes else (item,)
            else:
                # Each idle node of the run takes as many VMs as fit on an empty node (`per`): one by one, the
                # next VM fails there (usage never changes on an empty node, so no earlier end would help).
                cap = table.caps[item[0]]
                per = vms_per_node(cap, shape)
                if per is None:
                    per = len(vnodes)
                elif per == 0:
                    continue
                left = len(vnodes) - pos
                took = item[:-(-left // per)]
                if per == 1:
                    placed.extend(took)
                else:
                    placed.extend(itertools.islice(itertools.chain.from_iterable(
                        itertools.repeat(n, per) for n in took), left))
                pos += min(left, per * len(took))
                if pos == len(vnodes):
                    return _mapping(vnodes, placed), maxend
                cur = vnodes[pos]
                continue
            if shape is not None:
                # VMs that ask alike, on nodes whose usage is their profile's: what a node takes (and the end the
                # mapping holds until after each VM) depends on its profile, capacity and the end so far alone,
                # so nodes alike are walked once (`_on_node`), and a stretch of nodes that share a profile (and a
                # capacity) where the end stays put takes its VMs in one step
                one_cap = table.one_cap if not table.down else None
                stretches = _by_profile(run, usages, usage) if one_cap is not None else \
                    ((usage(pnode), (pnode,)) for pnode in run)
                for prof, nodes in stretches:
                    cap = one_cap if one_cap is not None else caps[nodes[0]]
                    i = 0
                    while i < len(nodes):
                        key = (prof, maxend, cap)
                        took = taken.get(key)
                        if took is None:
                            took = taken[key] = self._on_node(prof, cap, shape, start, maxend, strictend,
                                                              len(vnodes))
                        ends, newend = took
                        k = len(ends)
                        # the rest of the stretch does as this node when the end stays put (same profile, capacity
                        # and end: the same answer); else this node alone, and the next is asked at the new end
                        alike = len(nodes) - i if newend == maxend else 1
                        maxend = newend
                        if not k:
                            i += alike
                            continue
                        left = len(vnodes) - pos
                        full = (left - 1) // k      # nodes that take k VMs before the one that takes the last
                        if full < alike:
                            _each_takes(placed, nodes[i:i + full], k)
                            last = left - full * k
                            placed.extend(itertools.repeat(nodes[i + full], last))
                            return _mapping(vnodes, placed), ends[last - 1]
                        _each_takes(placed, nodes[i:i + alike], k)
                        pos += k * alike
                        i += alike
                continue
            for pnode in run:
                prof = usage(pnode)
                cap = table.caps[pnode]
                need = one if one is not None else demands[cur]
                while True:
                    key = (prof, need, maxend, cap)
                    fit = answers.get(key)
                    if fit is None:
                        fit = answers[key] = prof.fits_between(start, maxend, need, cap)
                    if fit:
                        placed.append(pnode)
                        pos += 1
                        if pos == len(vnodes):
                            return _mapping(vnodes, placed), maxend
                        cur = vnodes[pos]
                        need = vadd(need, one if one is not None else demands[cur])
                        continue
                    if strictend:
                        break
                    latest = prof.first_exceeding(start, need, cap)
                    if latest <= start or latest == INF:
                        break
                    maxend = latest
        return None, None

    @staticmethod
    def _on_node(prof, cap, shape, start: int, maxend: int, strictend: bool, most: int) -> tuple[list, int]:
        """What `_try`'s walk does on one node for VMs that all ask `shape`, from the end `maxend` on: (the end the
        mapping holds until after each VM it places there, at most `most` VMs; the end once the node is full)."""
        ends: list = []
        need = shape
        while len(ends) < most:
            if prof.fits_between(start, maxend, need, cap):
                ends.append(maxend)
                need = vadd(need, shape)
                continue
            if strictend:
                break
            latest = prof.first_exceeding(start, need, cap)
            if latest <= start or latest == INF:
                break
            maxend = latest
        return ends, maxend

    def map_fixed(self, lease: Lease, mapping: dict[int, int], start: int, end: int, strictend: bool):
        """Check a given placement (a lease resuming where its memory image is): (mapping, end) or (None, None)."""
        table = self.table
        per_node: dict[int, tuple] = {}
        demands = lease.demands
        one = demands.shape if type(demands) is AlikeVMs else None
        for vnode, pnode in mapping.items():
            d = one if one is not None else demands[vnode]
            per_node[pnode] = vadd(per_node[pnode], d) if pnode in per_node else d
        maxend = end
        for pnode, need in per_node.items():
            prof, cap = table.profiles[pnode], table.caps[pnode]
            if not fits(need, vsub(cap, prof.at(start))):
                return None, None
            if prof.fits_between(start, maxend, need, cap):
                continue
            latest = prof.first_exceeding(start, need, cap)
            if strictend or latest <= start:
                return None, None
            maxend = min(maxend, latest)
        return dict(mapping), maxend


def _mapping(vnodes, placed: list[int]):
    """The mapping vnode -> pnode of vnodes (in order) placed on `placed`: a Placement where they are 1..n."""
    if vnodes[0] == 1 and vnodes[-1] == len(vnodes):    # (distinct and sorted: exactly 1..n)
        return Placement(tuple(placed))
    return dict(zip(vnodes, placed))


def _by_profile(run, usages: list, usage):
    """(profile, nodes) for each stretch of the run's nodes (a list or a tuple, in node order) that share one profile
    (`usages`: each node's usage, by node; `usage`: its `__getitem__`), in order, each stretch cut from the run as one
    slice. A run of SPAN_LEAST or more nodes of consecutive ids (most often: nodes booked together lie together) has
    its profiles read as one slice, cut into stretches a few tests each (`same_runs`); others are read as the
    stretches are asked for (in C; a walk that ends early in a long run of busy nodes reads no further)."""
    n = len(run)
    if n >= SPAN_LEAST and run[-1] - run[0] == n - 1:
        profs = usages[run[0]:run[0] + n]
        for prof, i, j in same_runs(profs):
            yield prof, run[i:j]
        return
    i = 0
    for prof, same in itertools.groupby(map(usage, run)):    # (profiles compare by identity)
        k = len(list(same))
        yield prof, run[i:i + k]
        i += k


def _each_takes(placed: list[int], nodes, k: int) -> None:
    """Place k VMs on each of `nodes` in turn (`placed`: each VM's node, in VM order)."""
    if k == 1:
        placed.extend(nodes)
    else:
        placed.extend(itertools.chain.from_iterable(itertools.repeat(n, k) for n in nodes))


def vms_of(lease: Lease, demands: dict | None = None) -> tuple[tuple, tuple | None]:
    """A lease's smallest demand, and the one demand its VMs all ask (None: they do not ask alike): kept in its
    cache (a lease's demands never change). `demands`: the lease's own, or others to ask about (not kept)."""
    cache = getattr(lease, "cache", None)
    if demands is None or demands is lease.demands:
        if cache is not None:
            found = cache.get("vms")
            if found is not None:
                return found
        demands = lease.demands
    else:
        cache = None
    if type(demands) is AlikeVMs:
        found = (demands.shape, demands.shape)
        if cache is not None:
            cache["vms"] = found
        return found
    smallest = min(demands.values())
    first = demands[min(demands)]
    found = (smallest, first if all(map(first.__eq__, demands.values())) else None)
    if cache is not None:
        cache["vms"] = found
    return found


class Cached:
    """A lazy sequence that can be walked again: what was drawn from the iterator is kept."""

    def __init__(self, it) -> None:
        self.it = it
        self.seen: list = []

    def __iter__(self):
        yield from self.seen
        for x in self.it:
            self.seen.append(x)
            yield x
