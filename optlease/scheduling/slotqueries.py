"""The slot table's questions: where a need fits at an instant, what is free on some nodes or on the site as a whole
over a stretch, which instants come next, which reservations start or end at one, and a node's leases and usage
without some of them. Read-only: SlotTable (slottable.py) keeps the state these read (`profiles`, `caps`, `holders`,
`total`, `starts`, `ends`, `by_node`, ...)."""
from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from itertools import compress
from operator import attrgetter, le as _le, sub as _sub
from typing import Iterable

from optlease.scheduling.profile import Profile, Vec, vms_per_node, vsub
from optlease.scheduling.records import OneVMEach


def _in_order(rrs, state: str) -> list:
    """The reservations of `rrs` (None: none) in the given state, in the order they were made (`seq`)."""
    if not rrs:
        return []
    if len(rrs) == 1:
        (rr,) = rrs
        return [rr] if rr.state == state else []
    return sorted((rr for rr in rrs if rr.state == state), key=_SEQ)


_SEQ = attrgetter("seq")


class SlotQueries:
    """What the slot table answers (SlotTable sets the state)."""

    def nodes_with_room(self, need: Vec, t: int, nodes) -> list[int]:
        """The nodes (in the given order) where `need` fits at instant t."""
        caps, profiles = self.caps, self.profiles
        if self.one_cap is not None and not self.down:
            # nodes alike: asked once per profile, and the nodes picked by their profile's answer in one pass in C
            nodes = nodes if type(nodes) is list else list(nodes)
            profs = list(map(profiles.__getitem__, nodes))
            limit = tuple(map(_sub, self.one_cap, need))
            room = {prof: all(map(_le, prof.at(t), limit)) for prof in set(profs)}
            return list(compress(nodes, map(room.__getitem__, profs)))
        # what may be in use on a node of each capacity for `need` to fit: one comparison of vectors per node
        limits: dict[Vec, Vec] = {}
        # the answer for each profile (and capacity) met: nodes that share a profile are asked once
        answers: dict[Profile, tuple[Vec, bool]] = {}
        out = []
        append = out.append
        for n in nodes:   # this runs for every node of every fit test: Profile.at, inlined
            prof = profiles[n]
            cap = caps[n]
            seen = answers.get(prof)
            if seen is not None and seen[0] == cap:
                if seen[1]:
                    append(n)
                continue
            pt = prof.t
            if not pt or t < pt[0]:
                used = prof.zero
            else:
                used = prof.u[bisect_right(pt, t) - 1]
            limit = limits.get(cap)
            if limit is None:
                limit = limits[cap] = tuple(map(_sub, cap, need))
            room = all(map(_le, used, limit))
            answers[prof] = (cap, room)
            if room:
                append(n)
        return out

    def busy_groups(self, need: Vec | None, t: int) -> list[tuple[Profile, set[int]]] | None:
        """The busy nodes where `need` fits at instant t (None: all busy nodes), as (profile, the nodes that hold
        it), in no particular order: asked once per profile. None where the nodes are not all alike or some are
        out of planning (nodes_with_room then asks node by node)."""
        cap = self.one_cap
        if cap is None or self.down:
            return None
        if need is None:
            return list(self.holders.items())
        limit = tuple(map(_sub, cap, need))
        if self.room is not None:   # an index kept by a caller that asks many instants (roomindex.RoomIndex)
            found = self.room.groups(limit, t)
            if found is not None:
                return found
        out = []
        if len(limit) == 2:     # (two resource types: the comparisons written out)
            l0, l1 = limit
            for prof, nodes in self.holders.items():
                pt = prof.t
                u0, u1 = prof.zero if t < pt[0] else prof.u[bisect_right(pt, t) - 1]
                if u0 <= l0 and u1 <= l1:
                    out.append((prof, nodes))
            return out
        for prof, nodes in self.holders.items():
            pt = prof.t
            used = prof.zero if t < pt[0] else prof.u[bisect_right(pt, t) - 1]
            if all(map(_le, used, limit)):
                out.append((prof, nodes))
        return out

    def free_at(self, node: int, t: int) -> Vec:
        return vsub(self.caps[node], self.profiles[node].at(t))

    def free_on(self, nodes: Iterable[int], t: int) -> Vec:
        """What the given nodes in planning have free at instant t, added up (a node over its capacity adds
        nothing): asked once per profile and capacity the nodes hold, not node by node."""
        profiles, caps, down = self.profiles, self.caps, self.down
        if self.one_cap is not None and not down:
            groups = Counter(map(profiles.__getitem__, nodes))
            shared = self.one_cap
            counted = ((prof, shared, k) for prof, k in groups.items())
        else:
            pairs = Counter((profiles[n], caps[n]) for n in nodes if n not in down)
            counted = ((prof, cap, k) for (prof, cap), k in pairs.items())
        free = list(self.zero)
        for prof, cap, k in counted:
            for i, left in enumerate(map(_sub, cap, prof.at(t))):
                if left > 0:
                    free[i] += k * left
        return tuple(free)

    def total_free(self, t: int) -> Vec:
        return vsub(self.total_cap, self.total.at(t))

    def earliest_total_room(self, a: int, length: int, need: Vec) -> float:
        """The earliest x >= a at which the site as a whole has `need` free over [x, x + length) (INF: never)."""
        return self.total.earliest_room(a, length, need, self.total_cap)

    def holds_over(self, t: int, length: int, shape: Vec, most: int | None) -> int | None:
        """How many VMs that each ask `shape` the site's nodes could hold over [t, t + length), each node as many as
        fit beside its usage at every instant of it, added up and counted up to `most` (a count >= `most` means at
        least that many; None: every VM counted): asked once per profile. None where the nodes are not all alike or
        some are out of planning."""
        cap = self.one_cap
        if cap is None or self.down:
            return None
        per = vms_per_node(cap, shape)
        if per is None:
            return None
        held = len(self.idle.get(cap, ())) * per
        end = t + length
        # what may be in use on a node for one more VM to fit: a profile over it at some instant holds none
        limit = tuple(map(_sub, cap, shape))
        for prof, nodes in self.holders.items():
            if most is not None and held >= most:
                break
            times, usage = prof.t, prof.u
            i = bisect_right(times, t) - 1
            worst = usage[i] if i >= 0 else prof.zero
            if not all(map(_le, worst, limit)):
                continue    # (most busy profiles: a lease runs there at t)
            for i in range(i + 1, len(times)):
                if times[i] >= end:
                    break
                worst = tuple(map(max, worst, usage[i]))
                if not all(map(_le, worst, limit)):
                    break
            k = min((f // d for f, d in zip(map(_sub, cap, worst), shape) if d > 0), default=0)
            if k > 0:
                held += k * len(nodes)
        return held

    def earliest_total_room_without(self, rrs, a: int, length: int, need: Vec) -> float:
        """`earliest_total_room` as if the given reservations (in the table) were not there."""
        total = self.total.copy()
        for rr in rrs:
            if rr.demand:
                total.add(rr.start, rr.end, rr.total(), -1)
        return total.earliest_room(a, length, need, self.total_cap)

    def changed_past(self, mark: tuple[int, int], t: int) -> list | None:
        """The nodes of each change to the reservations since `mark` that reaches past t (None: the mark no longer
        holds). Only these nodes' usage and reservations from t on differ from what they were at the mark."""
        epoch, pos = mark
        if epoch != self.edit_epoch:
            return None
        ends, changed = self.edits, self.edit_nodes
        return [changed[i] for i in range(pos, len(ends)) if ends[i] > t]

    def is_full(self, t: int) -> bool:
        """No CPU free anywhere at t."""
        return self.total.at(t)[self.cpu] >= self.total_cap[self.cpu]

    def ends_after(self, t: int) -> Iterable[int]:
        """Times after t at which some reservation ends (capacity can only grow at these)."""
        ends = self.ends
        i = bisect_right(ends, t)
        while i < len(ends):
            x = ends[i]
            yield x
            i = bisect_right(ends, x, i)

    def next_event_after(self, t: int) -> int | None:
        """The next time after t at which a reservation starts or ends."""
        starts, ends = self.starts, self.ends
        i, j = bisect_right(starts, t), bisect_right(ends, t)
        first = starts[i] if i < len(starts) else None
        if j == len(ends):
            return first
        end = ends[j]
        return end if first is None or end < first else first

    def starting_at(self, t: int) -> list:
        return _in_order(self.starting.get(t), "scheduled")

    def ending_at(self, t: int) -> list:
        return _in_order(self.ending.get(t), "active")

    def count_leases_at(self, node: int, t: int) -> int:
        rrs = self.by_node[node]
        if not rrs:
            return 0
        if len(rrs) == 1:
            rr = next(iter(rrs))
            return 1 if rr.start <= t < rr.end else 0
        return len({rr.lease.id for rr in rrs if rr.start <= t < rr.end})

    def leases_between(self, a: int, b: int) -> list:
        seen: dict = {}
        for rr in self.reservations:
            if rr.start < b and a < rr.end and rr.demand:
                seen.setdefault(rr.lease.id, rr.lease)
        return [seen[k] for k in sorted(seen)]

    def nodes_of(self, leases: Iterable) -> set[int]:
        """The nodes where the given leases' reservations hold anything."""
        ids = {lease.id for lease in leases}
        return {n for rr in self.reservations if rr.lease.id in ids for n in rr.demand}

    def usage_of(self, leases: Iterable, node: int, a: int) -> Profile:
        """The node's usage from a on, as if the given leases' reservations were not there (for preemption)."""
        return self.usage_without(leases, a)(node)

    def usage_without(self, leases: Iterable, a: int):
        """node -> `usage_of(leases, node, a)`, with the given leases' ids taken once, and one profile built for the
        nodes whose other reservations hold the same over the same times (a wide lease's nodes, most often): a
        node's usage is the sum of those alone. Nodes that share one set of reservations (booked together), each of
        which holds one VM of one demand on every node it has (`OneVMEach`), have the same parts: worked out once
        for them all."""
        ids = {lease.id for lease in leases}
        by_node, zero = self.by_node, self.zero
        built: dict[tuple, Profile] = {}
        by_set: dict[int, tuple] = {}   # id of a set of such reservations -> (the set, kept alive; its usage)

        def usage(node: int) -> Profile:
            held = by_node[node]
            found = by_set.get(id(held))
            if found is not None:
                return found[1]
            parts = tuple((rr.start, rr.end, rr.demand[node]) for rr in held if rr.lease.id not in ids and rr.end > a)
            prof = built.get(parts)
            if prof is None:
                prof = built[parts] = Profile(zero)
                for start, end, d in parts:
                    prof.add(start, end, d)
            if all(type(rr.demand) is OneVMEach for rr in held):    # (every node of theirs holds the same)
                by_set[id(held)] = (held, prof)
            return prof
        return usage
