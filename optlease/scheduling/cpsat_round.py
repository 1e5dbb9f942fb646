"""`[scheduling] mapper: cpsat`: after each round's greedy pass, solve the round with CP-SAT and re-plan the
best-effort leases that have not started where the solver's plan is strictly better.

The greedy pass runs unchanged and commits its reservations. This hook then takes a snapshot of the slot table:
every reservation that has started, belongs to an AR or immediate lease, or cannot be moved (a migration already
booked) is a fixed occupancy on its nodes; every best-effort lease that is queued, suspended and waiting for a
resume, or booked for a start that has not begun is *movable*. The greedy plan of the movable leases is the hint.
Where CP-SAT's plan costs strictly less by the round objective, the leases whose start or nodes changed lose their
greedy reservations and get new ones built by the VM scheduler at the solver's start and nodes; each is checked
against the slot table before anything is committed, and the whole change is undone if one does not fit (the
greedy plan then stands). Leases the solver defers go back to the queue. Every round records its RoundStats.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from optlease.scheduling import overheads as oh
from optlease.scheduling.cpsat.prepare import wait_weight
from optlease.scheduling.records import MIGRATE, NOT_PROMISED, SHUTDOWN, SUSPEND, RR, Lease, NotSchedulable
from optlease.scheduling.snapshot import (Exclusion, LeasePlan, LeaseSnapshot, Migration, Outcome, Overheads,
                                          Phase, Plan, Policy, Preemption, RoundSnapshot, RoundStats, Suspension)

S = LeaseState
WAITING = (S.QUEUED, S.SUSPENDED_QUEUED)
BOOKED = (S.SCHEDULED, S.SUSPENDED_SCHEDULED)
# the share of a round's budget kept for committing its plan (500 bookings at 1,000 nodes took 0.06-0.1 s of 1 s)
COMMIT_SHARE = 0.15


@dataclass(frozen=True)
class RoundRecord:
    """One round of a cpsat run: when, how many leases were movable, and the solver's statistics."""

    now: int
    movable: int
    changed: int
    stats: RoundStats
    greedy_objective: int | None = None   # the greedy pass's plan in the same model


@dataclass
class _Withdrawn:
    lease: Lease
    state: S
    vmrr: RR | None
    queued: bool


class CpsatRound:
    """The round hook of a LeaseScheduler whose options say `mapper: cpsat`."""

    def __init__(self, sched) -> None:
        from optlease.scheduling.cpsat.solve import SolveOptions

        self.sched = sched
        opts = sched.opts
        self.options = SolveOptions(time_limit=opts.solver_time_limit, workers=opts.solver_workers,
                                    seed=opts.solver_seed, lookahead=opts.lookahead, stall=opts.solver_stall,
                                    presolve=False, work_limit=opts.solver_work_limit, weights=opts.weights)
        # The greedy pass already took every decision about ARs, immediate leases and suspensions: the round
        # only places best-effort starts and resumes (where the images are), from now on.
        self.policy = Policy(suspension=Suspension.NONE, migration=Migration.NO,
                             exclusion=Exclusion(opts.exclusion), threshold_factor=opts.threshold_factor,
                             preemption=Preemption.NO_PREEMPTION, non_schedulable_interval=0)
        self.records: list[RoundRecord] = []
        self._announced: dict[int, int] = {}   # lease id -> seq of the VM reservation the last round ended with
        self._seen: tuple[dict, dict] | None = None   # movable bookings and fixed ends the last round ended with
        self._next_solve = 0   # no round is solved before this time (solver-interval)

    @property
    def stats(self) -> list[RoundStats]:
        return [r.stats for r in self.records]

    # -- the round --------------------------------------------------------------------------------------------
    def __call__(self, now: int) -> None:
        wall = time.perf_counter()
        movable = self._movable(now)
        changed, greedy_cost = 0, None
        if not movable:
            stats = RoundStats("EMPTY", 0, 0.0, 0.0, 0.0, 0, 0, source="greedy")
        elif all(self._greedy_start(lease) == now for lease in movable):
            # every movable lease starts now, its earliest: no plan finishes any of them sooner
            stats = RoundStats("GREEDY-OPTIMAL", None, None, 0.0, time.perf_counter() - wall, 0, 0, source="greedy")
        elif len(movable) == 1 and self._at_earliest(movable[0], now):
            # one lease to place, booked at the earliest time it fits whole: nothing can finish it sooner
            stats = RoundStats("GREEDY-OPTIMAL", None, None, 0.0, time.perf_counter() - wall, 0, 0, source="greedy")
        elif self._nothing_new(now, movable):
            # the plan the last round ended with still stands: nothing arrived, moved or ended early since
            stats = RoundStats("UNCHANGED", None, None, None, time.perf_counter() - wall, 0, 0, source="greedy")
        elif now < self._next_solve:
            # too soon after the last solved round (solver-interval): the greedy pass keeps the plan up to date
            stats = RoundStats("SPACED", None, None, None, time.perf_counter() - wall, 0, 0, source="greedy")
        else:
            stats, changed, greedy_cost = self._solve(now, movable)
            self._next_solve = now + self.sched.opts.solver_interval
        self.records.append(RoundRecord(now, len(movable), changed, stats, greedy_cost))
        self._announced = {lease.id: lease.last_vmrr().seq for lease in self.sched.leases.values()
                           if lease.state in BOOKED and lease.last_vmrr() is not None}
        self._rank_promises()
        after = self._movable(now)
        self._seen = ({lease.id: self._booking(lease) for lease in after}, self._fixed(now, after))

    def _rank_promises(self) -> None:
        """At most `solver-promises` of the rounds' bookings are promises against ARs and premature ends (from
        `solver-promise-after`): those of the leases that arrived first. The others are plans an AR may displace
        until older leases start and they move up (models/cpsat-round.md, step 5)."""
        opts = self.sched.opts
        if opts.solver_promises <= 0:
            return
        booked = sorted((lease for lease in self.sched.leases.values()
                         if lease.state in BOOKED and lease.round_plan() is not None),
                        key=lambda lease: (lease.req.arrival, lease.id))
        for rank, lease in enumerate(booked):
            lease.last_vmrr().promised_from = self._promise_from(lease) if rank < opts.solver_promises else NOT_PROMISED

    def _promise_from(self, lease: Lease) -> int:
        """When a round's booking of the lease becomes a promise: once it has waited `solver-promise-after`."""
        return lease.req.arrival + self.sched.opts.solver_promise_after

    def _promised(self, lease: Lease, now: int) -> bool:
        """Whether a booked lease has waited `solver-promise-after`: the round keeps its place in line (it may only
        move it earlier), and once the round has booked it no AR displaces the booking (ARPreemptsEverything)."""
        return lease.state in BOOKED and now >= self._promise_from(lease)

    def _at_earliest(self, lease: Lease, now: int) -> bool:
        """Whether a booked lease starts where the VM scheduler finds its earliest whole fit without its booking."""
        if lease.state not in BOOKED:
            return False
        sched, vmrr = self.sched, lease.last_vmrr()
        rrs = (*vmrr.pre, vmrr, *vmrr.post)
        if vmrr.post and vmrr.post[0].kind != SHUTDOWN:
            return False   # booked to be suspended: a whole run elsewhere or later may finish sooner
        log, quiet = sched.log, sched.log.info_on
        log.info_on = False
        for rr in rrs:
            sched.table.remove(rr)
        try:
            best = self._asap(lease, now)
            first = best.pre[0].start if best.pre else best.start
        except NotSchedulable:
            first = None
        finally:
            for rr in rrs:
                sched.table.add(rr)
            log.info_on = quiet
        return first is not None and first >= self._greedy_start(lease)

    @staticmethod
    def _booking(lease: Lease) -> int | None:
        return lease.last_vmrr().seq if lease.state in BOOKED else None

    def _fixed(self, now: int, movable: list[Lease]) -> dict[int, tuple[int, int | None]]:
        """Per lease that is not movable: when its reservations end, and which VM reservation it is on."""
        ids, out = {lease.id for lease in movable}, {}
        for rr in self.sched.table.reservations:
            if rr.lease.id in ids or not rr.demand or rr.end <= now or rr.state not in ("scheduled", "active"):
                continue
            end, seq = out.get(rr.lease.id, (rr.end, None))
            vmrr = rr.lease.last_vmrr()
            out[rr.lease.id] = (max(end, rr.end), vmrr.seq if vmrr is not None else None)
        return out

    def _nothing_new(self, now: int, movable: list[Lease]) -> bool:
        """Whether the round holds only what the last one planned: the same movable leases with the same bookings,
        the fixed occupancies unchanged, except leases that started as booked and occupancies that ended on time."""
        if self._seen is None:
            return False
        seen_movable, seen_fixed = self._seen
        if any(seen_movable.get(lease.id, -1) != self._booking(lease) for lease in movable):
            return False
        fixed = self._fixed(now, movable)
        for lease_id, (end, seq) in fixed.items():
            before = seen_fixed.get(lease_id)
            if before is not None and before[0] == end:
                continue
            if before is None and seen_movable.get(lease_id) is not None and seen_movable[lease_id] == seq:
                continue   # started as booked
            return False
        return all(lease_id in fixed for lease_id, (end, _) in seen_fixed.items() if end > now)

    def _solve(self, now: int, movable: list[Lease]) -> tuple[RoundStats, int, int | None]:
        from optlease.scheduling.cpsat.objective import plan_cost
        from optlease.scheduling.cpsat.prepare import prepare
        from optlease.scheduling.cpsat.solve import solve_round

        snap, greedy, hint = self.snapshot(now, movable)
        data = prepare(snap, self.options.weights, self.options.lookahead)
        greedy_cost = plan_cost(data, greedy)   # the hint completes greedy's plan: greedy's own cost is the bar
        plan = solve_round(snap, replace(self.options, deadline=self._deadline()), hint, data)
        stats = plan.stats
        if stats.source == "hint":
            stats = replace(stats, source="completion")
        if stats.objective is None or not stats.objective < greedy_cost:   # strictly better, or greedy stands
            return replace(stats, source="greedy"), 0, greedy_cost
        # with solver-commit, book only what starts that soon; the rest stays queued and is planned again later
        commit = self.sched.opts.solver_commit
        got = {i: p if p.start is None or commit <= 0 or p.start <= now + commit else
               replace(p, outcome=Outcome.DEFERRED, start=None, nodes=(), end=None, reason="planned for later")
               for i, p in plan.by_id.items()}
        before = greedy.by_id
        moves = [lease for lease in movable if _differs(got[lease.id], before[lease.id])]
        if not moves:
            return replace(stats, source="greedy"), 0, greedy_cost
        if not self._apply(now, moves, got):
            return replace(stats, status=f"{stats.status} (did not fit the slot table)", source="greedy"), 0, \
                greedy_cost
        return stats, len(moves), greedy_cost

    def _deadline(self) -> float:
        """solver-time-limit is the whole round's budget: the completion and the search get what the greedy pass,
        the snapshot and the model left of it, less the part kept for committing the plan (time.perf_counter())."""
        return self.sched.round_began + (1 - COMMIT_SHARE) * self.options.time_limit

    # -- the snapshot -----------------------------------------------------------------------------------------
    def _movable(self, now: int) -> list[Lease]:
        out = []
        for lease in self.sched.leases.values():
            if lease.kind is not LeaseKind.BEST_EFFORT:
                continue
            if lease.state is S.QUEUED or (lease.state is S.SUSPENDED_QUEUED and lease.image_nodes):
                out.append(lease)
            elif lease.state in BOOKED:
                vmrr = lease.last_vmrr()
                rrs = (*vmrr.pre, vmrr, *vmrr.post)
                # a booking that ends in a suspension (before an AR) is not what the round model can state: kept
                if all(rr.state == "scheduled" and rr.kind not in (MIGRATE, SUSPEND) and rr.start >= now
                       for rr in rrs) and (lease.state is S.SCHEDULED or lease.image_nodes == vmrr.mapping):
                    out.append(lease)
        out.sort(key=lambda lease: (lease.req.arrival, lease.id))
        return out

    @staticmethod
    def _greedy_start(lease: Lease) -> int | None:
        if lease.state not in BOOKED:
            return None
        vmrr = lease.last_vmrr()
        return vmrr.pre[0].start if vmrr.pre else vmrr.start

    def snapshot(self, now: int, movable: list[Lease]) -> tuple[RoundSnapshot, Plan, Plan]:
        """The round as the solver sees it, the greedy plan of it, and the hint: the greedy plan with every lease
        it left queued booked at its earliest fit after the others (conservative backfilling, not committed)."""
        sched, opts = self.sched, self.sched.opts
        ids = {lease.id for lease in movable}
        types = sched.table.types
        # every reservation still to hold capacity, per lease: one envelope per lease, per node its largest use
        held: dict[int, tuple[Lease, list[RR]]] = {}
        for rr in sched.table.reservations:
            if rr.lease.id in ids or not rr.demand or rr.end <= now or rr.state not in ("scheduled", "active"):
                continue
            held.setdefault(rr.lease.id, (rr.lease, []))[1].append(rr)
        leases, hint = [], []
        release = {n: now for n in sched.table.nodes}   # when each node's fixed occupancies are over
        for lease_id in sorted(held):
            lease, rrs = held[lease_id]
            begin, end = max(now, min(rr.start for rr in rrs)), max(rr.end for rr in rrs)
            use: dict[int, tuple] = {}
            for rr in rrs:
                for pnode, d in rr.demand.items():
                    use[pnode] = tuple(map(max, use[pnode], d)) if pnode in use else d
            nodes = tuple(sorted(use))
            for n in nodes:
                release[n] = max(release[n], end)
            vms = tuple({t: v for t, v in zip(types, use[n]) if v} for n in nodes)
            req = LeaseRequest(lease_id, LeaseKind.AR, min(begin, lease.req.arrival), end - begin, vms, start=begin)
            if begin <= now:
                leases.append(LeaseSnapshot(req, Phase.RUNNING, nodes=nodes, ran=0, since=now))
            else:
                leases.append(LeaseSnapshot(req, Phase.RESERVED, planned_start=begin, planned_nodes=nodes,
                                            pinned=True))
                hint.append(LeasePlan(lease_id, Outcome.ACCEPTED, start=begin, nodes=nodes, end=end))
        ranked = sorted(release, key=lambda n: (release[n], n))
        extra = opts.solver_neighbourhood
        greedy = list(hint)
        completed = self._complete(now, movable)
        for lease in movable:
            snap, plan = self._lease_snapshot(lease, now)
            filled = completed.get(lease.id, plan)
            guard = self._latest_start(lease, filled, now)
            if guard is not None:
                snap = replace(snap, latest_start=guard)
            if extra > 0 and lease.numnodes + extra < len(ranked):
                # a neighbourhood: the nodes that free up first, and the nodes the plans and the image use
                near = {*ranked[:lease.numnodes + extra], *plan.nodes, *filled.nodes, *snap.nodes}
                snap = replace(snap, allowed_nodes=tuple(sorted(near)))
            leases.append(snap)
            greedy.append(plan)
            hint.append(filled)
        return RoundSnapshot(now, sched.site, tuple(leases), self.policy), Plan(tuple(greedy)), Plan(tuple(hint))

    def _latest_start(self, lease: Lease, hint: LeasePlan, now: int) -> int | None:
        """The wait guard: the solver may push a lease back past its hinted start only while its start stays within
        `solver-wait-guard` of its arrival, so that reordering for shorter leases never makes a long wait longer."""
        guard, lookahead = self.sched.opts.solver_wait_guard, self.sched.opts.lookahead
        if guard <= 0 or hint.outcome is not Outcome.ACCEPTED or hint.start is None:
            return None
        if lookahead is not None and hint.start > now + lookahead:
            return None
        return max(hint.start, lease.req.arrival + guard)

    def _complete(self, now: int, movable: list[Lease]) -> dict[int, LeasePlan]:
        """The hint's bookings: from the oldest lease the greedy pass left queued on, every movable lease but the
        promises booked in the line's order (`_line`) at its earliest fit (conservative backfilling; tried on the slot
        table and taken out again). Bookings made earlier give way, so a lease an AR sent back to the queue gets its
        place in line back."""
        queued = [(lease.req.arrival, lease.id) for lease in movable if lease.state in WAITING]
        if not queued:
            return {}
        oldest = min(queued)
        rebook = self._line(now, [lease for lease in movable if (lease.req.arrival, lease.id) >= oldest
                                  and not self._promised(lease, now)])   # a promise keeps its place
        sched, out, added = self.sched, {}, []
        withdrawn = [rr for lease in rebook if lease.state in BOOKED
                     for rr in (*lease.last_vmrr().pre, lease.last_vmrr(), *lease.last_vmrr().post)]
        log, quiet = sched.log, sched.log.info_on
        log.info_on = False
        for rr in withdrawn:
            sched.table.remove(rr)
        deadline = self._deadline()
        try:
            for i, lease in enumerate(rebook):
                if time.perf_counter() > deadline:
                    # out of budget: the leases not reached keep their bookings where these still fit
                    out.update(self._keep(rebook[i:], added))
                    break
                try:
                    vmrr = self._asap(lease, now)
                except NotSchedulable:
                    continue
                for rr in (*vmrr.pre, vmrr, *vmrr.post):
                    sched.table.add(rr)
                    added.append(rr)
                start = vmrr.pre[0].start if vmrr.pre else vmrr.start
                nodes = tuple(vmrr.mapping[v] for v in sorted(lease.demands))
                out[lease.id] = LeasePlan(lease.id, Outcome.ACCEPTED, start=start, nodes=nodes, end=vmrr.end)
        finally:
            for rr in added:
                sched.table.remove(rr)
            for rr in withdrawn:
                sched.table.add(rr)
            log.info_on = quiet
        return out

    def _keep(self, leases: list[Lease], added: list[RR]) -> dict[int, LeasePlan]:
        """For a completion the budget cut short: each booked lease it did not reach gets its withdrawn booking back
        on the slot table (recorded in `added`) where that still fits around what the completion booked, and is
        deferred in the hint where it does not (its greedy booking then overlaps the completion's)."""
        out = {}
        for lease in leases:
            if lease.state not in BOOKED:
                continue   # queued: deferred in the hint already
            vmrr = lease.last_vmrr()
            rrs = (*vmrr.pre, vmrr, *vmrr.post)
            if self._fits(rrs):
                for rr in rrs:
                    self.sched.table.add(rr)
                    added.append(rr)
            else:
                out[lease.id] = LeasePlan(lease.id, Outcome.DEFERRED, reason="the completion ran out of time")
        return out

    def _fits(self, rrs) -> bool:
        """Whether reservations not on the slot table fit on their nodes as it stands."""
        table = self.sched.table
        return all(table.profiles[pnode].fits_between(rr.start, rr.end, d, table.caps[pnode])
                   for rr in rrs for pnode, d in rr.demand.items())

    def _line(self, now: int, leases: list[Lease]) -> list[Lease]:
        """The order the completion books leases in: those that have waited past the wait guard first, in arrival
        order (the place in line the guard keeps); then the others by run time over their weight in the round's
        objective, shortest first (Smith's rule for the weighted completion time the round minimizes); the run is
        what a booking holds: what the lease has left, or its run-time estimate (scheduling.estimate)."""
        guard, weights = self.sched.opts.solver_wait_guard, self.sched.opts.weights
        waited, rest = [], []
        for lease in leases:
            (waited if 0 < guard <= now - lease.req.arrival else rest).append(lease)
        waited.sort(key=lambda lease: (lease.req.arrival, lease.id))
        booked_run = self.sched.vm.estimates.booked_run

        def smith(lease: Lease) -> float:
            run = booked_run(lease)
            return run / wait_weight(now, lease.req, weights, self._expected(lease, run))

        rest.sort(key=lambda lease: (smith(lease), lease.req.arrival, lease.id))
        return waited + rest

    def _asap(self, lease: Lease, now: int) -> RR:
        """The lease's earliest whole booking from now (resumed where its image is), not added to the slot table."""
        resuming = lease.is_suspended()
        fixed = dict(lease.image_nodes) if resuming else None
        earliest = {n: now for n in set(fixed.values())} if resuming else None
        return self.sched.vm.asap(lease, now, earliest, True, resuming, fixed, strict=True)

    def _lease_snapshot(self, lease: Lease, now: int) -> tuple[LeaseSnapshot, LeasePlan]:
        opts = self.sched.opts
        resuming = lease.is_suspended()
        run = self.sched.vm.estimates.booked_run(lease)   # what it has left, or its estimate (scheduling.estimate)
        ov = Overheads(resume=self._resume_time(lease) if resuming else 0,
                       shutdown=oh.shutdown_time(lease, opts))
        vnodes = sorted(lease.demands)
        kw: dict = {}
        if resuming:
            kw["nodes"] = tuple(lease.image_nodes[v] for v in vnodes)
        plan = LeasePlan(lease.id, Outcome.DEFERRED, reason="queued by the greedy pass")
        if lease.state in BOOKED:
            vmrr = lease.last_vmrr()
            start, nodes = self._greedy_start(lease), tuple(vmrr.mapping[v] for v in vnodes)
            plan = LeasePlan(lease.id, Outcome.ACCEPTED, start=start, nodes=nodes, end=start + ov.resume + run)
            if self._announced.get(lease.id) == vmrr.seq:   # booked by an earlier round: keep it stable
                kw.update(planned_start=start, planned_nodes=nodes)
        phase = Phase.SUSPENDED if resuming else Phase.RESERVED if "planned_start" in kw else Phase.QUEUED
        return LeaseSnapshot(lease.req, phase, ov, left=run, expected_run=self._expected(lease, run), **kw), plan

    @staticmethod
    def _expected(lease: Lease, run: int) -> int | None:
        """The whole run a lease's booking of `run` expects when that is a run-time estimate (None: what it asked
        for)."""
        return None if run == lease.remaining() else lease.accumulated + run

    # -- committing the solver's plan -------------------------------------------------------------------------
    def _apply(self, now: int, moves: list[Lease], plan: dict[int, LeasePlan]) -> bool:
        """Re-plan `moves` as the solver says; all or nothing (False: the greedy plan is left as it was)."""
        withdrawn = [self._withdraw(lease) for lease in moves]
        placed: list[Lease] = []
        ok = True
        for lease in sorted(moves, key=lambda l: (plan[l.id].start if plan[l.id].start is not None else 0, l.id)):
            p = plan[lease.id]
            if p.outcome is not Outcome.ACCEPTED or p.start is None:
                continue   # deferred: it stays in the queue
            vmrr = self._build(lease, p, now)
            if vmrr is None:
                ok = False
                break
            self._commit(lease, vmrr, now)
            placed.append(lease)
        if ok:
            return True
        for lease in placed:
            self._withdraw(lease)
        for w in withdrawn:
            self._restore(w)
        return False

    def _build(self, lease: Lease, p: LeasePlan, now: int) -> RR | None:
        sched, opts = self.sched, self.sched.opts
        resuming = lease.is_suspended()
        remaining, shutdown = sched.vm.estimates.booked_run(lease), oh.shutdown_time(lease, opts)
        resume = self._resume_time(lease) if resuming else 0
        mapping = {v: n for v, n in zip(sorted(lease.demands), p.nodes)}
        if resuming and mapping != lease.image_nodes:
            return None
        try:
            vmrr = sched.vm.build(lease, p.start, p.start + resume + remaining + shutdown, mapping, resuming,
                                  remaining, shutdown)
        except NotSchedulable:
            return None
        if not vmrr.post or vmrr.post[0].kind != SHUTDOWN or vmrr.start < now:
            return None
        return vmrr if self._fits((*vmrr.pre, vmrr, *vmrr.post)) else None

    def _resume_time(self, lease: Lease) -> int:
        """How long resuming a suspended lease on its image's nodes takes: the span of the resume blocks the VM
        scheduler builds there (the round resumes leases where their images are)."""
        blocks = oh.susprem_blocks(lease, lease.image_nodes, 0, oh.FORWARD, self.sched.opts, suspend=False)
        return max(end for _, end, _ in blocks)

    def _commit(self, lease: Lease, vmrr: RR, now: int) -> None:
        sched = self.sched
        if lease in sched.queue:
            sched.queue.remove(lease)
        # as the greedy pass counts them: a best-effort reservation for later than now
        vmrr.backfill = (vmrr.pre[0].start if vmrr.pre else vmrr.start) > now
        vmrr.promised_from = self._promise_from(lease)
        if vmrr.backfill:
            sched.vm.future_count += 1
        for rr in (*vmrr.pre, vmrr, *vmrr.post):
            sched.table.add(rr)
        lease.vmrrs.append(vmrr)
        lease.set_state(S.SUSPENDED_SCHEDULED if lease.state is S.SUSPENDED_QUEUED else S.SCHEDULED)

    def _withdraw(self, lease: Lease) -> _Withdrawn:
        """Take a lease's booked (not started) reservation out and put it back in the queue."""
        sched = self.sched
        w = _Withdrawn(lease, lease.state, None, lease in sched.queue)
        if lease.state in BOOKED:
            vmrr = lease.vmrrs.pop()
            w.vmrr = vmrr
            if vmrr.backfill:
                sched.vm.future_count -= 1
            for rr in (*vmrr.pre, vmrr, *vmrr.post):
                sched.table.remove(rr)
            lease.set_state(S.SUSPENDED_QUEUED if lease.state is S.SUSPENDED_SCHEDULED else S.QUEUED)
            sched.enqueue(lease)
        return w

    def _restore(self, w: _Withdrawn) -> None:
        sched, lease = self.sched, w.lease
        if w.vmrr is None:
            return
        if lease in sched.queue:
            sched.queue.remove(lease)
        vmrr = w.vmrr
        if vmrr.backfill:
            sched.vm.future_count += 1
        for rr in (*vmrr.pre, vmrr, *vmrr.post):
            sched.table.add(rr)
        lease.vmrrs.append(vmrr)
        lease.set_state(w.state)


def _differs(a: LeasePlan, b: LeasePlan) -> bool:
    placed_a = a.outcome is Outcome.ACCEPTED and a.start is not None
    placed_b = b.outcome is Outcome.ACCEPTED and b.start is not None
    if placed_a != placed_b:
        return True
    return placed_a and (a.start != b.start or tuple(a.nodes) != tuple(b.nodes))
