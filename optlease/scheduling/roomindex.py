"""Which busy profiles of the slot table have room for a VM at an instant, answered without a pass over every profile.

For each limit asked (what may be in use on a node for the VM to fit: capacity minus the VM), the instants at which
each busy profile has room, kept as intervals in sorted lists that a stabbing question reads in O(log n + answers),
and brought up to date from the table's touched log (every profile change notes its nodes there). While attached to
a slot table (`SlotTable.room`), it answers `busy_groups` with the same groups as the table's pass over every
profile: the CP-SAT round's hint completion asks it hundreds of times, each between a few changes (round_hint).
"""
from __future__ import annotations

from itertools import count
from operator import le as _le

from sortedcontainers import SortedList

from optlease.scheduling.profile import INF, Profile, Vec

LIMITS = 8   # limits indexed at once (the completion's leases have a few VM sizes)


def room_intervals(prof: Profile, limit: Vec) -> list[tuple[float, float]]:
    """The maximal intervals [a, b) over which the profile's usage stays within `limit` (a = -INF: from the start of
    time, b = INF: for ever)."""
    out = []
    begin = -INF if all(map(_le, prof.zero, limit)) else None
    for x, used in zip(prof.t, prof.u):
        room = all(map(_le, used, limit))
        if room and begin is None:
            begin = x
        elif not room and begin is not None:
            out.append((begin, x))
            begin = None
    if begin is not None:
        out.append((begin, INF))
    return out


class _Stabbing:
    """Intervals of profiles (by key) for one limit: which of them hold an instant. Bounded intervals are filed by
    the bit length of their length, so that those holding t are found among those that begin in (t - 2^c, t]."""

    def __init__(self) -> None:
        self.always: set[int] = set()           # room at every instant
        self.until = SortedList()               # (b, key): room on (-INF, b)
        self.since = SortedList()               # (a, key): room on [a, INF)
        self.within: dict[int, SortedList] = {}  # bit length of b - a -> (a, b, key): room on [a, b)
        self.of: dict[int, list[tuple[float, float]]] = {}   # key -> its intervals as filed

    def put(self, key: int, intervals: list[tuple[float, float]]) -> None:
        """File the key's intervals in place of those filed before."""
        old = self.of.get(key)
        if old == intervals:
            return
        if old is not None:
            self._file(key, old, remove=True)
        if intervals:
            self.of[key] = intervals
            self._file(key, intervals, remove=False)
        else:
            self.of.pop(key, None)

    def drop(self, key: int) -> None:
        self.put(key, [])

    def _file(self, key: int, intervals: list[tuple[float, float]], remove: bool) -> None:
        for a, b in intervals:
            if a == -INF and b == INF:
                (self.always.discard if remove else self.always.add)(key)
            elif a == -INF:
                (self.until.remove if remove else self.until.add)((b, key))
            elif b == INF:
                (self.since.remove if remove else self.since.add)((a, key))
            else:
                c = (b - a).bit_length()
                held = self.within.get(c)
                if held is None:
                    held = self.within[c] = SortedList()
                (held.remove if remove else held.add)((a, b, key))
                if not held:
                    del self.within[c]

    def holding(self, t: int) -> list[int]:
        """The keys with an interval that holds t (each once: a profile's intervals do not overlap)."""
        out = list(self.always)
        until, since = self.until, self.since
        out.extend(key for _, key in until.islice(until.bisect_right((t, INF))))
        out.extend(key for _, key in since.islice(0, since.bisect_right((t, INF))))
        for c, held in self.within.items():
            lo = held.bisect_right((t - (1 << c), INF))
            hi = held.bisect_right((t, INF))
            out.extend(key for _, b, key in held.islice(lo, hi) if b > t)
        return out


class RoomIndex:
    """Answers `SlotTable.busy_groups(need, t)` for a table whose nodes are all alike and in planning, from an
    index per limit kept in step with the table's touched log. A limit asked for the first time is not indexed (the
    table's own pass answers it: an index pays off only when asked again)."""

    def __init__(self, table) -> None:
        self.table = table
        self.keys: dict[Profile, int] = {}       # profile -> its key in every limit's index
        self.serial = count()
        self.profile_of: dict[int, Profile] = {}
        self.limits: dict[Vec, _Stabbing] = {}
        self.asked: set[Vec] = set()
        self.epoch = table.touch_epoch
        self.pos = len(table.touched)

    def groups(self, limit: Vec, t: int) -> list | None:
        """(profile, its holders) for the busy profiles whose usage at t is within `limit` (None: not indexed)."""
        index = self.limits.get(limit)
        if index is None:
            if limit not in self.asked:
                self.asked.add(limit)
                return None
            index = self._build(limit)
        else:
            self._catch_up()
            index = self.limits[limit]   # a touched log emptied since is filed afresh, in a new index
        holders, profile_of, out = self.table.holders, self.profile_of, []
        for key in index.holding(t):
            prof = profile_of[key]
            nodes = holders.get(prof)
            if nodes is None:    # no node holds it any more: a stale entry, dropped when met
                self._forget(key)
                continue
            out.append((prof, nodes))
        return out

    def _key(self, prof: Profile) -> int:
        key = self.keys.get(prof)
        if key is None:
            key = self.keys[prof] = next(self.serial)
            self.profile_of[key] = prof
        return key

    def _forget(self, key: int) -> None:
        for index in self.limits.values():
            index.drop(key)
        del self.keys[self.profile_of.pop(key)]

    def _build(self, limit: Vec) -> _Stabbing:
        self._catch_up()
        while len(self.limits) >= LIMITS:
            del self.limits[next(iter(self.limits))]
        index = self.limits[limit] = _Stabbing()
        for prof in self.table.holders:
            index.put(self._key(prof), room_intervals(prof, limit))
        return index

    def _catch_up(self) -> None:
        """File again the profiles of the nodes the table changed since the last question (all of them when the
        touched log was emptied)."""
        table = self.table
        log = table.touched
        if self.epoch != table.touch_epoch:
            self.epoch, self.pos = table.touch_epoch, len(log)
            limits = list(self.limits)
            self.keys.clear()
            self.profile_of.clear()
            self.limits.clear()
            for limit in limits:
                self._build(limit)
            return
        if self.pos == len(log):
            return
        profiles, holders = table.profiles, table.holders
        changed = {profiles[n] for n in set(log[self.pos:])}
        self.pos = len(log)
        for prof in changed:
            if prof not in holders:
                continue   # `empty`: no busy node holds it
            key = self._key(prof)
            for limit, index in self.limits.items():
                index.put(key, room_intervals(prof, limit))
