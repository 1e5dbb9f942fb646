"""Node capacity at every instant for a schedule read as a stream (`checker_stream`): what each lease holds is kept as
one compact record per (reservation, node) in buckets of nodes, written to temporary files past a bound, and each
bucket is swept over time alone (a node's usage depends on its own reservations only). The violations are those of
`checker._check_capacity`, message for message and in its order: by instant, then by the node's first event at that
instant, then by resource in the order the node met them."""
from __future__ import annotations

import os
import tempfile
from array import array
from itertools import groupby
from typing import Any

import numpy as np

from optlease.checker import EPSILON, _overload, newly_over
from optlease.checker_read import CheckedLease, CheckedSite, Violation, held_by_node

BUCKETS = 128            # node buckets, swept one at a time: a year of 9,216 nodes gives 72 nodes a bucket
SPILL = 1 << 21          # records kept in memory before they are written out: 2 million, 96 MB
FIELDS = 6               # a record: 2 start + 1, 2 end, its order of insertion, node, holding, demand


class _Held:
    """A reservation that holds nodes, as the violation messages name it."""

    __slots__ = ("index", "kind")

    def __init__(self, index: int, kind: str) -> None:
        self.index, self.kind = index, kind

    def label(self) -> str:
        return f"reservation {self.index} ({self.kind})"


class CapacitySweep:
    """Takes the leases in the document's order (`add`), then gives the capacity violations (`violations`)."""

    def __init__(self, site: CheckedSite, spill: int = SPILL, buckets: int = BUCKETS) -> None:
        self.site = site
        self.names = list(site.nodes)
        self.number = {name: i for i, name in enumerate(self.names)}
        self.count = max(1, min(buckets, len(self.names)))
        self.memory = [array("q") for _ in range(self.count)]
        self.kept, self.spill, self.seq = 0, spill, 0
        self.holdings: list[tuple[int, _Held]] = []
        self.demands: list[tuple[tuple[str, float], ...]] = []
        self.demand_no: dict[tuple[tuple[str, float], ...], int] = {}
        self.dir: tempfile.TemporaryDirectory | None = None

    def add(self, lease: CheckedLease) -> None:
        for r in lease.reservations:
            if not r.holds or r.start >= r.end:
                continue
            held = held_by_node(lease, r)
            h = len(self.holdings)
            self.holdings.append((lease.id, _Held(r.index, r.kind)))
            for node, demand in held.items():
                key = tuple(demand.items())
                d = self.demand_no.get(key)
                if d is None:
                    d = self.demand_no[key] = len(self.demands)
                    self.demands.append(key)
                n = self.number[node]
                # Intervals are half-open: at the same instant, ends (2t) free capacity before starts (2t+1) take it.
                self.memory[n % self.count].extend((2 * r.start + 1, 2 * r.end, self.seq, n, h, d))
                self.seq += 1
                self.kept += 1
            if self.kept > self.spill:
                self._spill()

    def _spill(self) -> None:
        if self.dir is None:
            self.dir = tempfile.TemporaryDirectory(prefix="optlease-check-")
        for b, records in enumerate(self.memory):
            if records:
                with open(os.path.join(self.dir.name, str(b)), "ab") as f:
                    records.tofile(f)
                self.memory[b] = array("q")
        self.kept = 0

    def _bucket(self, b: int) -> array:
        records = array("q")
        if self.dir is not None:
            path = os.path.join(self.dir.name, str(b))
            if os.path.exists(path):
                with open(path, "rb") as f:
                    records.frombytes(f.read())
                os.remove(path)
        records.extend(self.memory[b])
        self.memory[b] = array("q")
        return records

    def violations(self) -> list[Violation]:
        found: list[tuple[int, int, int, int, Violation]] = []
        try:
            exact = self._exact()
            for b in range(self.count):
                records = self._bucket(b)
                found.extend(self._sweep(self._suspects(records, *exact) if exact else records, len(found)))
        finally:
            if self.dir is not None:
                self.dir.cleanup()
                self.dir = None
        found.sort(key=lambda f: f[:4])
        return [f[4] for f in found]

    def _exact(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(demand per resource of each demand number, capacity per resource of each node), when the usage summed in
        numpy is the sweep's exactly: every amount a whole number up to 2^20 (sums stay under 2^53); else None."""
        rtypes = sorted({rtype for demand in self.demands for rtype, _ in demand})
        column = {rtype: i for i, rtype in enumerate(rtypes)}
        table = np.zeros((len(self.demands), len(rtypes)), dtype=np.int64)
        for d, demand in enumerate(self.demands):
            for rtype, amount in demand:
                if not (float(amount).is_integer() and 0 <= amount <= 1 << 20):
                    return None
                table[d, column[rtype]] = int(amount)
        capacity = np.array([[float(self.site.nodes[name].get(rtype, 0)) for rtype in rtypes] for name in self.names],
                            dtype=float).reshape(len(self.names), len(rtypes))
        return table, capacity

    def _suspects(self, records: array, table: np.ndarray, capacity: np.ndarray) -> array:
        """The records of the nodes whose usage goes over their capacity after some instant (usage rises only where
        a reservation starts, so the sweep flags exactly these nodes); a node's usage is its own reservations'."""
        if not records:
            return records
        rec = np.frombuffer(records, dtype=np.int64).reshape(-1, FIELDS)
        node = np.concatenate([rec[:, 3], rec[:, 3]])
        now = np.concatenate([rec[:, 0] >> 1, rec[:, 1] >> 1])
        delta = np.concatenate([table[rec[:, 5]], -table[rec[:, 5]]])
        order = np.lexsort((now, node))
        node, now = node[order], now[order]
        usage = np.cumsum(delta[order], axis=0)     # each node's events add up to nothing: no carry between nodes
        last = np.ones(len(node), dtype=bool)       # the last event of each (node, instant): usage after it
        last[:-1] = (node[1:] != node[:-1]) | (now[1:] != now[:-1])
        over = (usage[last] > capacity[node[last]] + EPSILON).any(axis=1)
        suspects = np.unique(node[last][over])
        kept = array("q")
        if len(suspects):
            kept.frombytes(rec[np.isin(rec[:, 3], suspects)].tobytes())
        return kept

    def _sweep(self, records: array, base: int) -> list[tuple[int, int, int, int, Violation]]:
        """One bucket's nodes swept over time, as `checker._check_capacity` sweeps them all; each violation keyed by
        (instant, the node's first event at it, the order found)."""
        it = iter(records)
        events = []
        for start, end, seq, n, h, d in zip(it, it, it, it, it, it):
            events.append((start, seq, n, h, d))
            events.append((end, seq, n, h, d))
        del records, it
        events.sort()
        usage: dict[int, dict[str, float]] = {}
        holders: dict[int, dict[int, tuple[int, _Held]]] = {}
        over: set[tuple[int, str]] = set()
        out: list[tuple[int, int, int, int, Violation]] = []
        for now, group in groupby(events, key=lambda e: e[0] >> 1):
            started: dict[int, tuple[tuple[int, int], list[tuple[int, _Held, tuple]]]] = {}
            for order, seq, n, h, d in group:
                use, sign = usage.setdefault(n, {}), 1 if order & 1 else -1
                demand = self.demands[d]
                for rtype, amount in demand:
                    use[rtype] = use.get(rtype, 0) + sign * amount
                mine = holders.setdefault(n, {})
                first = started.setdefault(n, ((order, seq), []))
                if order & 1:
                    mine[h] = self.holdings[h]
                    first[1].append((self.holdings[h][0], self.holdings[h][1], demand))
                else:
                    mine.pop(h, None)
            for n, ((order, seq), starts) in started.items():
                name = self.names[n]
                capacity = self.site.nodes[name]
                for rtype, amount, lid, r in newly_over(n, usage[n], capacity, over, starts):
                    message = _overload(name, rtype, amount, capacity.get(rtype, 0), now, r,
                                        holders[n])  # type: ignore[arg-type]
                    out.append((now, order, seq, base + len(out), Violation(lid, "capacity", message)))
        return out


def sweep_capacity(leases: Any, site: CheckedSite, **limits: int) -> list[Violation]:
    """The capacity violations of `leases` (CheckedLease, in the document's order) on `site`."""
    sweep = CapacitySweep(site, **limits)
    for lease in leases:
        sweep.add(lease)
    return sweep.violations()
