"""The slot table: every resource reservation on every node over time, and fast questions about what is free.

Usage of each node is a piecewise-constant profile (breakpoints + usage vectors aligned with the site's resource
types); a site-wide profile answers "is there enough anywhere?" in O(log n) before any per-node work is done, and
nodes with an empty profile (idle from now on) are kept apart, in node order per capacity, so that questions about
them cost nothing per node (nodeclasses.py: nodes alike share a profile and are filed idle or busy).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from itertools import count
from typing import Iterable

from optlease.domain.site import Site
from optlease.scheduling.nodeclasses import NodeClasses, read, stretches
# the profile's vector helpers are part of the slot table's interface: callers import them from here
from optlease.scheduling.profile import INF, Profile, Vec, fits, vadd, vms_per_node, vsub  # noqa: F401
from optlease.scheduling.records import SHUTDOWN, OneVMEach
from optlease.scheduling.slotqueries import SlotQueries

EDITS_MOST = 20_000      # changes noted in `edits` before it is emptied (marks taken before then no longer hold)
EDIT_NODES_HELD = 1_000_000   # nodes the changes in `edits` may name at once before it is emptied, as when long
TOUCHED_MOST = 100_000   # nodes noted in `touched` before it is emptied (its readers then start afresh)


def _unfile(index: dict, t: int, rr) -> bool:
    """Take a reservation out of an index by instant; True when none is left at that instant (its key gone too)."""
    bucket = index.get(t)
    if bucket is None:
        return False
    bucket.discard(rr)
    if bucket:
        return False
    del index[t]
    return True


def _less_pruned(prof: Profile, start: int, end: int, d: Vec, before: int) -> None:
    """Take `d` off the profile over [start, end), then prune it before `before`."""
    prof.add(start, end, d, -1)
    prof.prune(before)


class Times(list):
    """Instants in order, each as often as it was added: a plain sorted list with SortedList's few methods the
    slot table's callers use. A table holds hundreds of reservations at a time, and most come last in time (a
    booking ends after those before it): an insertion is an append or a short move in C, where a SortedList pays
    its bookkeeping in Python at every change."""

    __slots__ = ()

    def add(self, t: int) -> None:
        if not self or t >= self[-1]:
            self.append(t)
        else:
            insort(self, t)

    def discard(self, t: int) -> None:
        """Take out one occurrence of t (none: nothing happens)."""
        i = bisect_left(self, t)
        if i < len(self) and self[i] == t:
            del self[i]

    def bisect_left(self, t: int) -> int:
        return bisect_left(self, t)

    def bisect_right(self, t: int) -> int:
        return bisect_right(self, t)

    def __contains__(self, t) -> bool:
        i = bisect_left(self, t)
        return i < len(self) and self[i] == t


class SlotTable(NodeClasses, SlotQueries):
    """Reservations per node; `rr.demand` maps physical node -> usage vector. Pure bookkeeping, no policy (its
    questions: slotqueries.py)."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.types = site.resource_types
        self.zero: Vec = tuple(0 for _ in self.types)
        self.caps: dict[int, Vec] = {n: self.vector(site.capacity(n)) for n in site.node_ids}
        # (one int object per node: the idle lists, and so a wide lease's mappings, point to these)
        self.nodes: list[int] = list(site.node_ids)
        # Nodes with the same usage over time share one Profile (copy on write, SlotTable._change): a lease's VMs
        # booked on nodes alike change one profile, not one per node, and questions about them are answered once.
        # Every node with nothing booked has `empty`.
        self.empty = Profile(self.zero)
        # (a list at the node's id: node ids are 1..n, and a stretch of consecutive nodes is read or set as one
        # slice, nodeclasses.fill)
        self.profiles: list[Profile | None] = [None] + [self.empty] * len(self.nodes)
        self.empty.owners = len(self.nodes)
        # the nodes that hold each profile other than `empty`: questions about busy nodes are asked per profile
        self.holders: dict[Profile, set[int]] = {}
        # whether the nodes that hold a profile hold the same reservations (GreedyHosts.score_groups), until a
        # reservation on one of them is added or forgotten (`_unalike`): otherwise a profile's holders only lose
        # nodes (changes copy a profile or change it for all its holders), and a group of alike nodes stays alike
        self.alike: dict[Profile, bool] = {}
        caps = set(self.caps.values())
        # the capacity of every node when all nodes are alike (None: they are not)
        self.one_cap: Vec | None = next(iter(caps)) if len(caps) == 1 else None
        # the reservations on each node, but a shutdown that takes no time: it holds nothing at any instant and
        # ends where its VM reservation (on the same nodes) does, so no question about a node's reservations
        # (how many hold it at an instant, which end when) has another answer without it. Frozen sets, shared by
        # the nodes that hold the same reservations (NodeClasses._hold): a wide lease's nodes change one set.
        self.by_node: list[frozenset | None] = [None] + [frozenset()] * len(self.nodes)     # (as `profiles`)
        self.total = Profile(self.zero)
        self.total_cap: Vec = self.zero
        for cap in self.caps.values():
            self.total_cap = vadd(self.total_cap, cap)
        # every reservation's end (one entry each: how many end by an instant is asked), and the instants at which
        # some reservation starts (once each; `starting` holds the reservations)
        self.ends = Times()
        self.starts = Times()
        self.starting: dict[int, set] = {}
        self.ending: dict[int, set] = {}
        self.reservations: set = set()
        # VM reservations booked for the future by backfilling (their `backfill` flag set when added), until they
        # leave the table: what a premature end may book again, without a walk over every lease
        self.backfills: set = set()
        self.cpu = self.types.index("CPU")
        # Nodes out of planning (their host went silent): left out of `nodes`, their capacity counts as zero, so
        # no mapper and no fit test can place anything there until they come back.
        self.down: set[int] = set()
        # Bumped whenever capacity is given back (a reservation ends or is removed): a lease that did not fit
        # cannot fit later unless this moved, since adding reservations only takes capacity away.
        self.released = 0
        # What tells a lease that must start at a later instant whether its try could go otherwise: `gave_back`, bumped
        # whenever room at or after the instant the table is at comes back (a reservation taken out or cut short, a node
        # back; a reservation that ends gives back only the past), and `past_ends`, how many ends were dropped because
        # they had passed (so that the ends still ahead can be counted from one pass to the next).
        self.gave_back = 0
        self.past_ends = 0
        # The leases whose reservations were added, moved or dropped since the owner last emptied it (None: not
        # kept). The daemon keeps it, to rewrite and re-enact only the leases a change touched.
        self.changed: set | None = None
        # The nodes whose reservations or profile changed, in order, while a reader keeps it (None: not kept): the
        # mapper's host scores (hostscores.py) look again at these alone. Emptied when long, with `touch_epoch`
        # bumped; bumped too when a node leaves or re-enters planning (every node is looked at again).
        self.touched: list[int] | None = None
        self.touch_epoch = 0
        # While set (roomindex.RoomIndex, kept in step with `touched`): what answers busy_groups without a pass over
        # every busy profile. The CP-SAT round's hint completion sets it for its searches.
        self.room = None
        # For each change to the reservations, in order, the end of the time it changes (a reservation's end; what a
        # cut gives back ends at the old end) and the nodes it changes (`edit_nodes`; None: too many to keep, taken
        # as every node): from an instant that no change since a mark reaches, every question about the table
        # (about those nodes) has the answer it had at the mark (`unchanged_from`, `untouched_from`). Emptied when
        # long or naming many nodes (`EDIT_NODES_HELD`: what a wide lease's cancelled bookings keep alive is
        # bounded), with `edit_epoch` bumped; bumped too when a node leaves or re-enters planning.
        self.edits: list[int] = []
        self.edit_nodes: list = []
        self._edit_held = 0
        self.edit_epoch = 0
        self._seq = count()
        # the reservation `cut` has just cut short and pruned at its new end (its `forget` then prunes nothing)
        self._pruned = None
        self.rank: dict[int, int] = {n: i for i, n in enumerate(site.node_ids)}
        # The nodes in planning whose profile is empty, by capacity (sorted lists: node ids grow with node order,
        # and a wide lease takes and gives back runs of them at once); the others are `busy` (NodeClasses).
        self.idle: dict[Vec, list[int]] = {}
        for n in self.nodes:
            self.idle.setdefault(self.caps[n], []).append(n)

    def nodes_in_order(self, nodes: Iterable[int]) -> list[int]:
        """The given nodes in node order (the order of `nodes`)."""
        return sorted(nodes, key=self.rank.__getitem__)

    def take_down(self, node: int) -> None:
        """Take a node out of planning (idempotent). What it still holds stays in its profile: the caller removes
        the reservations of the leases that were on it."""
        if node in self.down or node not in self.caps:
            return
        if not self.profiles[node].t:     # (idle: in planning, a node is idle exactly where its profile is empty)
            self._unidle(self.caps[node], (node,))
        self.down.add(node)
        self.total_cap = vsub(self.total_cap, self.caps[node])
        self.caps[node] = self.zero
        self.nodes = [n for n in self.site.node_ids if n not in self.down]
        self.touch_epoch += 1
        self.edit_epoch += 1

    def bring_up(self, node: int) -> None:
        """Give a node back to planning with its whole capacity (idempotent)."""
        if node not in self.down:
            return
        self.down.discard(node)
        self.caps[node] = self.vector(self.site.capacity(node))
        self.total_cap = vadd(self.total_cap, self.caps[node])
        self.nodes = [n for n in self.site.node_ids if n not in self.down]
        if not self.profiles[node].t:     # filed again idle by its profile (busy otherwise)
            self._reidle(self.caps[node], (node,))
        self.released += 1      # capacity came back: leases that did not fit may fit now
        self.gave_back += 1
        self.touch_epoch += 1
        self.edit_epoch += 1

    def vector(self, amounts: dict[str, int]) -> Vec:
        return tuple(amounts.get(r, 0) for r in self.types)

    def next_seq(self) -> int:
        return next(self._seq)

    def mark(self) -> tuple[int, int]:
        """Where the table's changes are now (`unchanged_from` tells whether any reached past an instant since)."""
        return self.edit_epoch, len(self.edits)

    def unchanged_from(self, mark: tuple[int, int], t: int) -> bool:
        """Whether every change to the reservations since `mark` ended by t: from t on, usage, reservations and
        ends are what they were at the mark."""
        epoch, pos = mark
        edits = self.edits
        return epoch == self.edit_epoch and (pos == len(edits) or max(edits[pos:]) <= t)

    def untouched_from(self, mark: tuple[int, int], t: int, nodes: set[int]) -> bool:
        """Whether no change to the reservations since `mark` that reaches past t changed any of the given nodes:
        from t on, their usage and reservations are what they were at the mark."""
        epoch, pos = mark
        if epoch != self.edit_epoch:
            return False
        ends, changed = self.edits, self.edit_nodes
        return all(ends[i] <= t or nodes.isdisjoint(changed[i]) for i in range(pos, len(ends)))

    def _edit(self, end, nodes) -> None:
        edits = self.edits
        if len(edits) >= EDITS_MOST or self._edit_held >= EDIT_NODES_HELD:
            edits.clear()
            self.edit_nodes.clear()
            self.edit_epoch += 1
            self._edit_held = 0
        edits.append(end)
        # (the reservation's own demand, not a copy: its nodes)
        self.edit_nodes.append(nodes)
        self._edit_held += len(nodes)

    def add(self, rr) -> None:
        if self.changed is not None:
            self.changed.add(rr.lease)
        self._pruned = None
        start, end = rr.start, rr.end
        demand = rr.demand
        self._edit(end, demand)
        self.reservations.add(rr)
        if start < end or rr.kind != SHUTDOWN:
            if self.alike and start >= end:
                self._unalike(demand)     # (with usage: forgotten per group, below)
            if self.touched is not None and start >= end:
                self._touch(demand)     # (a change of usage notes its nodes itself: `_change`)
            self._hold(demand, rr, True)
        # (a reservation of no length changes no profile, and every change of usage files its nodes: they stay
        # filed as they are)
        if start < end:
            # (adding usage empties a profile only where a reservation was taken out after its past was pruned:
            # what was left of it, below zero, is made up again)
            groups = self._groups(demand)
            if self.alike:      # (`_unalike`, from the groups: their nodes' reservations change)
                for prof, _, _ in groups:
                    self.alike.pop(prof, None)
            self._refile([(prof, self._change(prof, nodes, Profile.add, start, end, d), nodes)
                          for prof, d, nodes in groups])
            if demand:
                self.total.add(start, end, rr.total())
        if rr.backfill:
            self.backfills.add(rr)
        self.ends.add(end)      # (`_index`, inlined)
        bucket = self.starting.get(start)
        if bucket is None:
            self.starting[start] = {rr}
            self.starts.add(start)
        else:
            bucket.add(rr)
        bucket = self.ending.get(end)
        if bucket is None:
            self.ending[end] = {rr}
        else:
            bucket.add(rr)

    def remove(self, rr) -> None:
        self._take_out(rr, rr.start, rr.end)
        self.forget(rr)

    def _take_out(self, rr, start: int, end: int, prune: int | None = None) -> None:
        """Subtract the reservation's usage over [start, end) from its nodes' profiles and the site's total (and,
        given `prune`, prune its nodes' profiles before then in the same change)."""
        self._pruned = None
        demand = rr.demand
        self._edit(end, demand)
        if start >= end:
            return      # no usage to take out (a shutdown that takes no time)
        # emptied, or (a reservation pruned away already) filled with what is left of it before the prune
        change, last = (Profile.add, -1) if prune is None else (_less_pruned, prune)
        self._refile([(prof, self._change(prof, nodes, change, start, end, d, last), nodes)
                      for prof, d, nodes in self._groups(rr.demand)])
        if rr.demand:
            self.total.add(start, end, rr.total(), -1)

    def forget(self, rr, now: int | None = None) -> None:
        """Drop a reservation that has ended: its usage lies in the past, where no query looks (prune clears it;
        given `now`, its nodes are pruned at once, so that a node it leaves idle is filed idle now)."""
        self.released += 1
        start, end, demand = rr.start, rr.end, rr.demand
        if now is not None and end <= now:
            self.past_ends += 1
        else:
            self.gave_back += 1
        if self.changed is not None:
            self.changed.add(rr.lease)
        self._edit(end, demand)
        self.reservations.discard(rr)
        self.backfills.discard(rr)
        unfiled = start >= end and rr.kind == SHUTDOWN     # (never in `by_node`: `add`)
        # its nodes' reservations change: `_unalike`, from the groups by profile where they are made below
        unalike = not unfiled and bool(self.alike)
        if not unfiled:
            self._hold(demand, rr, False)
        all_pruned = False
        if now is not None and self._pruned is rr and end == now:
            # cut short and pruned at `now` in one change, just before (`cut`): nothing of it is left to prune
            all_pruned = not demand
        elif now is not None:
            # (most often pruned already: a shutdown that takes no time ends where its run did)
            profiles = self.profiles
            if len(demand) == 1:
                (node,) = demand
                prof = profiles[node]
                groups = ((prof, None, (node,)),)
            else:
                groups = self.by_profile(demand)
            if unalike:
                for prof, _, _ in groups:
                    self.alike.pop(prof, None)
                unalike = False
            stale = [(prof, nodes) for prof, _, nodes in groups if prof.stale(now)]
            if stale:
                self._refile([(prof, self._change(prof, nodes, Profile.prune, now), nodes) for prof, nodes in stale])
            all_pruned = len(stale) == len(groups)
        if unalike:
            self._unalike(demand)
        if not all_pruned and not unfiled and self.touched is not None:
            self._touch(demand)     # (a pruned node is noted by `_change`)
        self.ends.discard(end)
        if _unfile(self.starting, start, rr):
            self.starts.discard(start)
        _unfile(self.ending, end, rr)
        if type(demand) is OneVMEach:
            demand.stretched = False    # (its nodes' copy in order, let go: the reservation is kept as history)

    def _unalike(self, nodes) -> None:
        """Forget whether the holders of the given nodes' profiles hold the same reservations (their reservations
        are about to change); every other profile's holders keep theirs, so its answer stands."""
        alike, profiles, found = self.alike, self.profiles, stretches(nodes)
        for prof in set(map(profiles.__getitem__, nodes) if found is None else read(profiles, found[1])):
            alike.pop(prof, None)

    def _touch(self, nodes) -> None:
        """Note nodes whose reservations or profile change (`touched` is kept)."""
        log = self.touched
        if len(log) > TOUCHED_MOST:
            log.clear()
            self.touch_epoch += 1
        log.extend(nodes)

    def cut(self, rr, end: int, prune: bool = False) -> None:
        """End a reservation (in the table) earlier, at `end` (its start or later): what `retime(rr, rr.start, end)`
        leaves in the table, from one subtraction per node rather than a removal and an addition (the profiles
        hold the same usage either way, and a profile's breakpoints depend on its usage alone). `prune`: `end` is
        now and the reservation ends at once (`forget(rr, end)` follows): its nodes are pruned in the same change."""
        old = rr.end
        if not rr.start <= end < old:
            self.retime(rr, rr.start, end)
            return
        if self.changed is not None:
            self.changed.add(rr.lease)
        self._take_out(rr, end, old, end if prune else None)
        if prune:
            self._pruned = rr
        self.released += 1   # capacity given back, as a removal gives it
        self.gave_back += 1
        self.ends.discard(old)
        _unfile(self.ending, old, rr)
        rr.end = end
        self.ends.add(end)
        self.ending.setdefault(end, set()).add(rr)

    def retime(self, rr, start: int, end: int) -> None:
        """Move a reservation (it must be in the table)."""
        self.remove(rr)
        rr.start, rr.end = start, end
        self.add(rr)

    def prune(self, before: int) -> None:
        busy = list(self.busy)
        self._refile([(prof, self._change(prof, nodes, Profile.prune, before), nodes)
                      for prof, _, nodes in self.by_profile(busy, runs=False)])
        self.total.prune(before)
