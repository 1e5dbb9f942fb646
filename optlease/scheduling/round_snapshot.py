"""The round as the solver sees it (a mixin of CpsatRound): which best-effort leases the round may move, which
running leases it may suspend, and the snapshot of the slot table with the greedy plan and the hint, each movable
lease offered its neighbourhood of nodes (models/cpsat-round.md, *One round, step by step*, 2)."""
from __future__ import annotations

from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from optlease.scheduling import overheads as oh
from optlease.scheduling.records import BOOKED, MIGRATE, RR, SHUTDOWN, SUSPEND, Lease
from optlease.scheduling.snapshot import (LeasePlan, LeaseSnapshot, Migration, Outcome, Overheads, Phase, Plan,
                                          RoundSnapshot)

S = LeaseState
# Settings the round derives rather than asks for (models/cpsat-round.md, settings the round derives):
# a lease is offered the nodes that free up first, as many as it has VMs and this many more, besides the nodes its
# plans and images use: enough to choose among, few enough that a 1,000-node round stays small
NEIGHBOURHOOD = 16


class RoundSnapshotter:
    """The snapshot half of CpsatRound (a mixin: it needs `self.sched`, `self.policy`, `self.images`,
    `self._announced`, `_complete` and `_latest_start`)."""

    def _movable(self, now: int) -> list[Lease]:
        out, moves = [], self.policy.migration is not Migration.NO
        for lease in self.sched.leases.values():
            if lease.kind is not LeaseKind.BEST_EFFORT:
                continue
            if lease.state is S.QUEUED or (lease.state is S.SUSPENDED_QUEUED and lease.image_nodes):
                out.append(lease)
            elif lease.state in BOOKED:
                vmrr = lease.last_vmrr()
                rrs = (*vmrr.pre, vmrr, *vmrr.post)
                # a booking that ends in a suspension (before an AR) is not what the round model can state: kept;
                # so is one that resumes elsewhere where the round may not (migration: no, or a disk image it does not copy)
                if all(rr.state == "scheduled" and rr.kind != SUSPEND and (moves or rr.kind != MIGRATE)
                       and rr.start >= now for rr in rrs) \
                        and (lease.state is S.SCHEDULED or lease.image_nodes == vmrr.mapping
                             or (moves and not self.sched.resumes_in_place(lease))) \
                        and (self.images is None or self.images.movable(lease, now)):
                    out.append(lease)
        out.sort(key=lambda lease: (lease.req.arrival, lease.id))
        return out

    @staticmethod
    def _greedy_start(lease: Lease) -> int | None:
        """When a booked lease's start or resume begins (a migration's copy before it holds no node)."""
        if lease.state not in BOOKED:
            return None
        vmrr = lease.last_vmrr()
        return next((rr.start for rr in vmrr.pre if rr.kind != MIGRATE), vmrr.start)

    def snapshot(self, now: int, movable: list[Lease], running: list[Lease] = (),
                 completed: dict[int, LeasePlan] | None = None) -> tuple[RoundSnapshot, Plan, Plan]:
        """The round as the solver sees it, the greedy plan of it, and the hint: the greedy plan with every lease
        it left queued booked at its earliest fit after the others (conservative backfilling, not committed), or
        the movable leases' plans `completed` when the caller has them (`admit`).
        `running`: the running leases the round may suspend (`_suspendable`), as they are, not as occupancies."""
        sched = self.sched
        ids = {lease.id for lease in (*movable, *running)}
        types = sched.table.types
        # every reservation still to hold capacity, per lease: one envelope per lease, per node its largest use
        held: dict[int, list[RR]] = {}
        for rr in sched.table.reservations:
            if rr.lease.id in ids or not rr.demand or rr.end <= now or rr.state not in ("scheduled", "active"):
                continue
            rrs = held.get(rr.lease.id)
            if rrs is None:
                held[rr.lease.id] = [rr]
            else:
                rrs.append(rr)
        leases, hint = [], []
        release = {n: now for n in sched.table.nodes}   # when each node's fixed occupancies are over
        # occupancies of one use share their VM demands (a 5,000-node round has 5,000 running leases of a few
        # shapes: one dict per shape, not one per lease, for the steps after it to read and the collector to walk)
        shapes: dict[tuple, dict[str, int]] = {}
        alone: dict[tuple, tuple[dict[str, int]]] = {}   # per use, the VMs of an occupancy of one node
        for lease_id in sorted(held):
            rrs = held[lease_id]
            lease = rrs[0].lease
            first = rrs[0]
            begin, end, one = first.start, first.end, True
            for rr in rrs:
                begin, end = min(begin, rr.start), max(end, rr.end)
                one = one and rr.demand is first.demand
            begin = max(now, begin)
            if one:   # a run and its shutdown share one demand (vmsched.rr): nothing to merge
                use = dict(first.demand.items())
            else:
                use = {}
                for rr in rrs:
                    for pnode, d in rr.demand.items():
                        use[pnode] = tuple(map(max, use[pnode], d)) if pnode in use else d
            nodes = tuple(sorted(use))
            for n in nodes:
                if release[n] < end:
                    release[n] = end
            if len(nodes) == 1:
                vms = alone.get(use[nodes[0]])
                if vms is None:
                    vms = alone[use[nodes[0]]] = (_shape(shapes, types, use[nodes[0]]),)
            else:
                vms = tuple(_shape(shapes, types, use[n]) for n in nodes)
            req = LeaseRequest(lease_id, LeaseKind.AR, min(begin, lease.req.arrival), end - begin, vms, start=begin)
            if begin <= now:
                leases.append(LeaseSnapshot(req, Phase.RUNNING, nodes=nodes, ran=0, since=now))
            else:
                leases.append(LeaseSnapshot(req, Phase.RESERVED, planned_start=begin, planned_nodes=nodes,
                                            pinned=True))
                hint.append(LeasePlan(lease_id, Outcome.ACCEPTED, start=begin, nodes=nodes, end=end))
        # the nodes of a lease the round may suspend free up first, the longest-running lease's first
        left, runs = {}, [self._running_snapshot(lease, now) for lease in running]
        for snap in runs:
            left.update({n: max(left.get(n, 0), snap.remaining) for n in snap.nodes})
        ranked = sorted(release, key=lambda n: (release[n], -left.get(n, 0), n))
        extra = NEIGHBOURHOOD
        greedy = list(hint)
        for snap in runs:   # greedy and the hint let them run on
            as_is = LeasePlan(snap.id, Outcome.ACCEPTED, nodes=snap.nodes, end=now + snap.remaining)
            leases.append(snap)
            greedy.append(as_is)
            hint.append(as_is)
        if completed is None:
            if self.images is not None:
                self.images.start_hint(now)
            completed = self._complete(now, movable)
        plain = self._plain_nodes(now, movable, runs, leases, ranked)
        plain_sorted = sorted(plain)
        # equal neighbourhoods are one tuple: the model's steps key their work by candidate list, so the thousands of
        # leases that share every plain node cost what one does (a 5,000-node round had 2,000 copies)
        shared: dict[tuple[int, ...], tuple[int, ...]] = {}
        head = min(movable, key=lambda lease: (lease.req.arrival, lease.id), default=None)
        for lease in movable:
            kw, plan = self._lease_snapshot(lease, now)
            filled = completed.get(lease.id, plan)
            guard = self._latest_start(lease, filled, lease is head, now)
            if guard is not None:
                kw["latest_start"] = guard
            if extra > 0 and lease.numnodes + extra < len(ranked):
                # a neighbourhood: the nodes that free up first, and the nodes the plans and the image use
                own = kw.get("nodes", ())
                near = {*ranked[:lease.numnodes + extra], *plan.nodes, *filled.nodes, *own}
                if self.images is not None:   # and nodes whose cache holds its image, those free first
                    near.update(self.images.near(lease, now, ranked))
                if not own:   # a fresh start may take any plain node too: the model pools them
                    # (the plain nodes sorted once: the few others merged in, not the thousands sorted per lease)
                    extra_nodes = tuple(sorted(near.difference(plain)))
                    near = shared.get(extra_nodes)
                    if near is None:
                        near = shared[extra_nodes] = tuple(sorted(plain_sorted + list(extra_nodes)))
                else:
                    near = tuple(sorted(near))
                kw["allowed_nodes"] = near
            # (one snapshot per lease, made once with all it holds: a copy per field set cost 2,000 copies)
            snap = LeaseSnapshot(**kw)
            leases.append(snap)
            greedy.append(plan)
            hint.append(filled)
        link = self.images.link(now, movable, {snap.id: snap.allowed_nodes for snap in leases}) \
            if self.images is not None else None
        return RoundSnapshot(now, sched.site, tuple(leases), self.policy, link), Plan(tuple(greedy)), \
            Plan(tuple(hint))

    def _plain_nodes(self, now: int, movable: list[Lease], runs: list[LeaseSnapshot],
                     fixed: list[LeaseSnapshot], ranked: list[int] = ()) -> set[int]:
        """The nodes the model can pool (cpsat.pools) and which the neighbourhood therefore need not leave out: where
        every movable lease asks one VM demand, the nodes that nothing not yet begun holds and no image, planned
        booking or suspendable lease names. Empty where the movable leases ask different demands."""
        demands = {tuple(sorted(d.items())) for lease in movable for d in lease.req.vms}
        if len(demands) != 1:
            return set()
        named = {n for snap in fixed if snap.phase is not Phase.RUNNING for n in snap.planned_nodes}
        named.update(n for snap in runs for n in snap.nodes)
        if self.images is not None:   # nodes a movable lease's image reaches without a transfer of its own
            for lease in movable:
                if self.sched.prep.needs(lease) and not lease.is_suspended():
                    named.update(self.images.near(lease, now, ranked))
                    if self.sched.prep.opts.mechanism == "unicast":
                        named.update(self.images.ready(lease, now)[0])
        for lease in movable:
            if lease.image_nodes:
                named.update(lease.image_nodes.values())
            if self._announced.get(lease.id) is not None and lease.state in BOOKED:
                named.update(lease.last_vmrr().mapping.values())
        return set(self.sched.table.nodes) - named

    def _suspendable(self, now: int) -> list[Lease]:
        """With `solver-suspend: for-waiting`: the running best-effort leases the round may suspend at once — the
        policy lets them be suspended, they have run Haizea's scheduling threshold, they are booked to run on and
        then shut down (no suspension booked), and they have more left to run than a suspension and a resume take."""
        opts = self.sched.opts
        if not self.policy.suspend_for_waiting:
            return []
        out = []
        for lease in self._running_on():
            vmrr = lease.last_vmrr()
            if now - vmrr.start < oh.scheduling_threshold(lease, opts, resuming=False):
                continue
            overheads = self._op_time(lease, vmrr.mapping, True) + self._op_time(lease, vmrr.mapping, False)
            if vmrr.end - now > overheads:
                out.append(lease)
        return out

    def _preemptible_for(self, ar: Lease) -> list[Lease]:
        """The running leases the round model may suspend for an AR the greedy pass refused: those the preemption
        policy lets greedy preempt for it, still running at its start (the model keeps the scheduling threshold)."""
        sched = self.sched
        if ar.kind is not LeaseKind.AR or not sched.policies.preemption_enabled:
            return []
        start = ar.req.start
        return [lease for lease in self._running_on() if lease.last_vmrr().end > start
                and sched.policies.preemption.score(ar, lease, start) >= 0]

    def _running_on(self) -> list[Lease]:
        """The running best-effort leases `suspension` lets be suspended that are booked to run on and then shut down
        (no suspension booked), by id."""
        sched, out = self.sched, []
        for lease in sched.leases.values():
            if lease.kind is not LeaseKind.BEST_EFFORT or lease.state is not S.ACTIVE \
                    or not oh.can_be_suspended(lease, sched.opts):
                continue
            vmrr = lease.last_vmrr()
            if vmrr.state == "active" and all(rr.kind == SHUTDOWN and rr.state == "scheduled" for rr in vmrr.post):
                out.append(lease)
        out.sort(key=lambda lease: lease.id)
        return out

    def _running_snapshot(self, lease: Lease, now: int) -> LeaseSnapshot:
        """A running lease the round may suspend, as booked: it runs to its booking's end, then shuts down."""
        vmrr, opts = lease.last_vmrr(), self.sched.opts
        ov = Overheads(suspend=self._op_time(lease, vmrr.mapping, True),
                       resume=self._op_time(lease, vmrr.mapping, False),
                       migrate=oh.migration_time(lease, opts, vmrr.mapping), shutdown=oh.shutdown_time(lease, opts))
        nodes = tuple(vmrr.mapping[v] for v in sorted(lease.demands))
        return LeaseSnapshot(lease.req, Phase.RUNNING, ov, nodes=nodes, stays=self.sched.resumes_in_place(lease),
                             left=vmrr.end - now,
                             ran=lease.accumulated + now - vmrr.start, since=vmrr.start,
                             expected_run=self._expected(lease, vmrr.end - vmrr.start))

    def _lease_snapshot(self, lease: Lease, now: int) -> tuple[dict, LeasePlan]:
        """A movable lease as the round sees it (the LeaseSnapshot's fields, which the caller completes with its
        guard and neighbourhood), and its greedy plan."""
        opts = self.sched.opts
        resuming = lease.is_suspended()
        run = self.sched.vm.estimates.booked_run(lease)   # what it has left, or its estimate (scheduling.estimate)
        ov = Overheads(resume=self._resume_time(lease) if resuming else 0,
                       migrate=oh.migration_time(lease, opts) if resuming else 0,
                       shutdown=oh.shutdown_time(lease, opts))
        vnodes = sorted(lease.demands)
        kw: dict = {}
        if resuming:
            kw["nodes"] = tuple(lease.image_nodes[v] for v in vnodes)
            kw["stays"] = self.sched.resumes_in_place(lease)
        plan = LeasePlan(lease.id, Outcome.DEFERRED, reason="queued by the greedy pass")
        if lease.state in BOOKED:
            vmrr = lease.last_vmrr()
            start, nodes = self._greedy_start(lease), tuple(vmrr.mapping[v] for v in vnodes)
            plan = LeasePlan(lease.id, Outcome.ACCEPTED, start=start, nodes=nodes, end=start + ov.resume + run,
                             transfer_start=self.images.transfer_start(lease) if self.images is not None else None)
            if self._announced.get(lease.id) == vmrr.seq:   # booked by an earlier round: keep it stable
                kw.update(planned_start=start, planned_nodes=nodes)
        phase = Phase.SUSPENDED if resuming else Phase.RESERVED if "planned_start" in kw else Phase.QUEUED
        return dict(request=lease.req, phase=phase, overheads=ov, left=run, expected_run=self._expected(lease, run),
                    **kw), plan

    @staticmethod
    def _expected(lease: Lease, run: int) -> int | None:
        """The whole run a lease's booking of `run` expects when that is a run-time estimate (None: what it asked
        for)."""
        return None if run == lease.remaining() else lease.accumulated + run


def _shape(shapes: dict[tuple, dict[str, int]], types, use: tuple) -> dict[str, int]:
    """The VM demand of a usage vector (per resource type of the table, the types it uses), one dict per vector."""
    got = shapes.get(use)
    if got is None:
        got = shapes[use] = {t: v for t, v in zip(types, use) if v}
    return got
