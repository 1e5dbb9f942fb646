"""The `cpsat` planner (`[scheduling] mapper: cpsat`): each round, the greedy pass plans first, then CP-SAT solves the
round with the greedy plan as hint and re-plans the best-effort leases that have not started where its plan is
strictly better; an AR or immediate lease the greedy pass refused is offered to the model before it is refused.

The greedy pass runs unchanged and commits its reservations. The round then takes a snapshot of the slot table:
every reservation that has started, belongs to an AR or immediate lease, or cannot be moved (a migration already
booked) is a fixed occupancy on its nodes; every best-effort lease that is queued, suspended and waiting for a
resume, or booked for a start that has not begun is *movable*. The greedy plan of the movable leases is the hint.
Where CP-SAT's plan costs strictly less by the round objective, its decisions for now are committed (the leases it
starts now, its suspensions, and the oldest lease's booking; the others it plans later stay queued, a rolling
horizon): the leases whose start or nodes changed lose their greedy reservations and get new ones built by the VM
scheduler at the solver's start and nodes; each is checked against the slot table before anything is committed,
and the whole change is undone if one does not fit (the greedy plan then stands).
Leases the solver defers go back to the queue. With `solver-suspend: for-waiting` the round may also suspend running
preemptible leases at once for waiting ones. Every round records its RoundStats.
Every decision is deterministic: searches stop on CP-SAT's deterministic work limit (`solver-work-limit`), and the
round's spacing counts simulated seconds. This module decides when a round is solved and what of its plan is
committed, and offers the model the leases greedy refused; the snapshot the solver sees is taken in `round_snapshot`,
the hint's completion is in `round_hint`, committing a plan in `round_commit`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

from optlease.domain.lease import LeaseKind
from optlease.scheduling import overheads as oh
from optlease.scheduling.records import BOOKED, SHUTDOWN, Lease, NotSchedulable
from optlease.scheduling.round_commit import PlanCommit
from optlease.scheduling.round_gc import young_only
from optlease.scheduling.round_hint import HintCompletion
from optlease.scheduling.round_immediate import ImmediateRoom
from optlease.scheduling.round_images import RoundImages
from optlease.scheduling.round_promise import RoundPromises
from optlease.scheduling.round_snapshot import RoundSnapshotter
from optlease.scheduling.snapshot import (Exclusion, LeasePlan, LeaseSnapshot, Migration, Outcome, Overheads,
                                          Phase, Plan, Policy, Preemption, RoundSnapshot, RoundStats, Suspension)

# Settings the round derives rather than asks for (models/cpsat-round.md, settings the round derives; the
# neighbourhood's size is round_snapshot.NEIGHBOURHOOD):
# the least simulated time between two solved rounds: the greedy pass keeps the plan up to date in between
INTERVAL = 1800
# the search moves the tails the hint starts within this many seconds and holds the later ones (cpsat.window):
# the next four solved rounds' starts (one round's cost 11 % of the Blue month's bounded slowdown, four 7 %)
WINDOW = 4 * INTERVAL


@dataclass(frozen=True)
class RoundRecord:
    """One round of a cpsat run: when, how many leases were movable, and the solver's statistics."""

    now: int
    movable: int
    changed: int
    stats: RoundStats
    greedy_objective: int | None = None   # the greedy pass's plan in the same model
    rebooked: bool = False   # a booking the last round made was lost since: solved however soon (INTERVAL)
    early: bool = False      # the round before the instant's greedy pass (CpsatRound.plan)


@dataclass(frozen=True)
class Admission:
    """An AR or immediate lease the greedy pass refused, offered to the round model (CpsatRound.admit)."""

    now: int
    lease_id: int
    admitted: bool
    moved: int            # bookings the model moved to admit it
    stats: RoundStats
    suspended: int = 0    # running leases the model suspended for it
    requeued: int = 0     # an immediate lease: leases requeued for it where the model could not admit it


class CpsatRound(HintCompletion, ImmediateRoom, PlanCommit, RoundPromises, RoundSnapshotter):
    """The cpsat planner of one LeaseScheduler (scheduling.planner)."""

    name = "cpsat"

    def __init__(self, sched) -> None:
        from optlease.scheduling.cpsat.solve import SolveOptions

        self.sched = sched
        opts = sched.opts
        # one worker, a fixed seed, stopped by deterministic work: the same round always gets the same plan
        # the search moves the tails that start before the next solved round and holds the later ones at the hint
        # (cpsat.window); an admission the hint cannot make may move any booking to make room
        self.options = SolveOptions(time_limit=opts.solver_time_limit, workers=1, seed=0, presolve=False,
                                    linearization_level=0, disjunctive_in_cumulative=False,
                                    work_limit=opts.solver_work_limit, weights=opts.weights, window=WINDOW)
        sched.on_refusal = self.admit
        # disk images (`lease-preparation: imagetransfer`): the link and caches in the model, the commit's transfers
        self.images = RoundImages(sched) if sched.prep is not None else None
        # The greedy pass already took every decision about suspensions for ARs, and admitted the ARs and immediate
        # leases it could (`admit` offers the model those it refused): the round places best-effort starts and
        # resumes (elsewhere than the images where `migration` allows), from now on, and with `solver-suspend:
        # for-waiting` it may suspend running preemptible leases at once for waiting ones.
        for_waiting = opts.solver_suspend == "for-waiting"
        self.policy = Policy(suspension=Suspension(opts.suspension) if for_waiting else Suspension.NONE,
                             migration=Migration(opts.migration), exclusion=Exclusion(opts.exclusion),
                             threshold_factor=opts.threshold_factor, preemption=Preemption.NO_PREEMPTION,
                             non_schedulable_interval=0, suspend_for_waiting=for_waiting)
        self.records: list[RoundRecord] = []
        self.admissions: list[Admission] = []
        self._announced: dict[int, int] = {}   # lease id -> seq of the VM reservation the last round ended with
        self._seen: tuple[dict, dict] | None = None   # movable bookings and fixed ends the last round ended with
        self._next_solve = 0   # no round is solved before this time (INTERVAL)
        self._no_sooner = {}   # promised bookings `_move_up` found no sooner fit for, and when (round_promise)

    @property
    def stats(self) -> list[RoundStats]:
        return [r.stats for r in self.records]

    # -- the round --------------------------------------------------------------------------------------------
    def plan(self, now: int) -> None:
        """The greedy pass, then the CP-SAT round over its plan. A promised lease that lost its booking is booked
        again first (`_book_promised`); where a booking the last round made was lost since (`_unbooked`), the round
        first books again before the greedy pass starts younger leases in its room. The collector walks only
        what the round makes (round_gc)."""
        with young_only():
            self._book_promised(now)
            if self._unbooked(self._movable(now)):
                self.round(now, rebooking=True)
            self._move_up(now)
            self.sched.schedule(now)
            self.round(now)

    def round(self, now: int, rebooking: bool = False) -> None:
        wall = time.perf_counter()   # measured for the record only: no decision reads the clock
        movable = self._movable(now)
        self._images_for(now, movable)
        changed, greedy_cost, lost = 0, None, self._unbooked(movable)
        if not movable:
            stats = RoundStats("EMPTY", 0, 0.0, 0.0, 0.0, 0, 0, source="greedy")
        elif all(self._greedy_start(lease) == now for lease in movable):
            # every movable lease starts now, its earliest: no plan finishes any of them sooner
            stats = RoundStats("GREEDY-OPTIMAL", None, None, 0.0, time.perf_counter() - wall, 0, 0, source="greedy")
        elif len(movable) == 1 and self._at_earliest(movable[0], now) and not self._suspendable(now) \
                and (self.images is None or self.images.transfer_start(movable[0]) is None):
            # one lease to place, booked at the earliest time it fits whole, and no running lease the round may
            # suspend for it: nothing can finish it sooner (nor, images managed, save it a transfer of its own)
            stats = RoundStats("GREEDY-OPTIMAL", None, None, 0.0, time.perf_counter() - wall, 0, 0, source="greedy")
        elif self._nothing_new(now, movable):
            # the plan the last round ended with still stands: nothing arrived, moved or ended early since
            stats = RoundStats("UNCHANGED", None, None, None, time.perf_counter() - wall, 0, 0, source="greedy")
        elif now < self._next_solve and not lost and not self._transfer_due(now, movable):
            # too soon after the last solved round (INTERVAL): the greedy pass keeps the plan up to date (but not
            # once a booking it made was lost, and a transfer of a movable lease's image about to begin is the
            # round's last chance to spare it)
            stats = RoundStats("SPACED", None, None, None, time.perf_counter() - wall, 0, 0, source="greedy")
        else:
            stats, changed, greedy_cost = self._solve(now, movable)
            self._next_solve = now + INTERVAL
        self.records.append(RoundRecord(now, len(movable), changed, stats, greedy_cost, lost or rebooking, rebooking))
        self._announced = {lease.id: lease.last_vmrr().seq for lease in self.sched.leases.values()
                           if lease.state in BOOKED and lease.last_vmrr() is not None}
        after = self._movable(now)
        self._seen = ({lease.id: self._booking(lease) for lease in after}, self._fixed(now, after))

    def _unbooked(self, movable: list[Lease]) -> bool:
        """Whether a lease the last round booked has lost its booking since (the greedy pass re-booked the future
        after a premature end, or an AR displaced it, and it did not fit again): the round's plan no longer holds
        and the greedy pass, which books no more than its backfilling limit ahead, does not keep it up to date."""
        if self._seen is None:
            return False
        seen = self._seen[0]
        return any(seen.get(lease.id) is not None and self._booking(lease) is None for lease in movable)

    def _transfer_due(self, now: int, movable: list[Lease]) -> bool:
        """Whether a movable lease's own image transfer begins now: once begun, it is a commitment."""
        return self.images is not None and any(self.images.transfer_start(lease) == now for lease in movable)

    def _images_for(self, now: int, movable: list[Lease]) -> None:
        """The round's movable leases own their transfers (the model places them again)."""
        if self.images is not None:
            self.images.exclude = {lease.id for lease in movable}
            self.images.start_hint(now)

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
            first = best.begin()
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

        running = self._suspendable(now)
        self._promise(now, movable)
        snap, greedy, hint = self.snapshot(now, movable, running)
        data = prepare(snap, self.options.weights, self.options.lookahead)
        greedy_cost = plan_cost(data, greedy)   # the hint completes greedy's plan: greedy's own cost is the bar
        plan = self._plan(snap, self.options, hint, data)
        stats = plan.stats
        if stats.source == "hint":
            stats = replace(stats, source="completion")
        if stats.objective is None or not stats.objective < greedy_cost:   # strictly better, or greedy stands
            return replace(stats, source="greedy"), 0, greedy_cost
        got, before = plan.by_id, greedy.by_id
        got = self._committed(now, movable, got)
        moves = [lease for lease in movable if _differs(got[lease.id], before[lease.id])]
        stops = [lease for lease in running if got[lease.id].suspend_at is not None]
        if not moves and not stops:
            return replace(stats, source="greedy"), 0, greedy_cost
        if not self._apply(now, moves, got, stops):
            return replace(stats, status=f"{stats.status} (did not fit the slot table)", source="greedy"), 0, \
                greedy_cost
        return stats, len(moves) + len(stops), greedy_cost

    def _committed(self, now: int, movable: list[Lease], got: dict[int, LeasePlan]) -> dict[int, LeasePlan]:
        """The part of a round's plan that is committed: the starts it makes now, the booking of the oldest lease
        (its place in line), and (disk images managed) the later bookings whose image the plan decides
        (`RoundImages.decides`); every other lease it plans later stays queued. (Committing the starts the search
        plans within its window too won on the tuning set but not on the suite, and a younger lease booked so, whose
        image transfer then began, started the head later than greedy would: models/cpsat-round.md, *On workloads
        it was not tuned on*.)"""
        head = min(movable, key=lambda lease: (lease.req.arrival, lease.id), default=None)
        out = dict(got)
        self._for_image, self._kept = set(), set()
        for lease in movable:
            p = got[lease.id]
            if lease is not head and self._is_promised(lease) and p.start is not None and p.start > now:
                self._kept.add(lease.id)
            if lease is head or self._is_promised(lease) or p.outcome is not Outcome.ACCEPTED or p.start is None \
                    or p.start <= now:
                continue
            if self.images is not None and self.images.decides(lease):
                self._for_image.add(lease.id)
            else:
                out[lease.id] = LeasePlan(lease.id, Outcome.DEFERRED, reason="planned for later: stays queued")
        return out

    # -- admission ------------------------------------------------------------------------------------------
    def admit(self, lease: Lease, now: int) -> bool:
        """An AR or immediate lease the greedy pass refused (`LeaseScheduler.on_refusal`): the round model decides
        (`_admit_by_model`); an immediate lease it cannot admit where it stands is admitted where requeueing the
        work Haizea's preemption would cancel rather than suspend makes room for it (`_room_by_requeueing`)."""
        if self._admit_by_model(lease, now):
            return True
        victims = self._room_by_requeueing(lease, now)
        if victims is None:
            return False
        offered = self.admissions[-1] if self.admissions and self.admissions[-1].lease_id == lease.id \
            and self.admissions[-1].now == now else None
        record = Admission(now, lease.id, True, 0, offered.stats if offered is not None else
                           RoundStats("REQUEUED", None, None, None, 0.0, 0, 0, source="greedy"),
                           requeued=len(victims))
        if offered is not None:
            self.admissions[-1] = record
        else:
            self.admissions.append(record)
        self.sched.log.info("LSCHED", "Lease #%i admitted by requeueing leases %s" % (
            lease.id, [other.id for other in victims]))
        return True

    def _admit_by_model(self, lease: Lease, now: int) -> bool:
        """Let the round model decide an AR or immediate lease the greedy pass refused:
        the round as it stands, every best-effort booking not begun movable (the oldest within its guard), for an AR the
        running leases greedy could preempt for it as leases the model may suspend before its start, the lease as
        new. Booked, with the bookings the model moves and the suspensions it makes, where the model accepts it;
        all or nothing (models/cpsat-round.md, step 6)."""
        from optlease.scheduling.cpsat.prepare import prepare

        sched = self.sched
        movable, running = self._movable(now), self._preemptible_for(lease)
        self._images_for(now, movable)
        self._for_image, self._kept = set(), set()   # an admission commits its whole plan: later bookings count
        # as greedy's do
        if not movable and not running:
            return False   # nothing the model may move or suspend: the greedy pass's refusal stands
        # the hint: the greedy pass's search for the lease with the round's bookings lifted, the movable leases
        # booked again after it; where the lease does not fit even so, the round's own hint (the lease refused)
        line = self._line(now, movable)
        if lease.kind is LeaseKind.IMMEDIATE:   # a promise gives way to an AR only (round_promise): kept, bounded
            line = [other for other in line if not self._is_promised(other)]
        lifted, tried = self._rebook(now, line, new=lease)
        snap, greedy, hint = self.snapshot(now, movable, running, lifted if tried is not None else None)
        leases = list(snap.leases)
        # where the hint admits the lease (the greedy pass's own search found room once the round's bookings are
        # lifted), the model must admit it too: it then only decides how the others make way. The model's value of
        # an admission (`weight-rejected`) would otherwise weigh it against the waiting it costs, and refuse what
        # greedy, with those bookings not made, admits (models/cpsat-round.md, step 6)
        leases.append(LeaseSnapshot(lease.req, Phase.NEW, Overheads(shutdown=oh.shutdown_time(lease, sched.opts)),
                                    required=tried is not None))
        policy = self.policy if not running else replace(
            self.policy, suspension=Suspension(sched.opts.suspension), preemption=Preemption.AR_PREEMPTS_EVERYTHING,
            suspend_for_waiting=False)
        snap = RoundSnapshot(now, snap.site, tuple(leases), policy, snap.link)
        refused = LeasePlan(lease.id, Outcome.REJECTED, reason="refused by the greedy pass")
        greedy, hint = Plan((*greedy.leases, refused)), Plan((*hint.leases, tried or refused))
        data = prepare(snap, self.options.weights, self.options.lookahead)
        # where the hint admits the lease, room is made already: the search improves on it in the round's window
        # (held tails keep one node per VM, not one Boolean per node); where it does not, the whole round is free
        plan = self._plan(snap, self.options if tried is not None else replace(self.options, window=None), hint, data)
        got, before = plan.by_id, greedy.by_id
        new = got[lease.id]
        accepted = new.outcome is Outcome.ACCEPTED and new.start is not None
        moves = [other for other in movable if _differs(got[other.id], before[other.id])]
        stops = [other for other in running if got[other.id].suspend_at is not None]
        admitted = accepted and self._apply(now, moves, got, stops, new=(lease, new))
        if not admitted and tried is not None:
            # the model's plan did not fit the slot table (the snapshot over-approximates), or the model found no
            # plan admitting it within its work limit: the lease goes where the greedy pass's search put it, and
            # the bookings in its way back to the queue (the hint admits it, so the round never refuses it)
            in_way = self._make_room(lease, tried, movable, now)
            admitted, moves, stops = in_way is not None, in_way or [], []
        self.admissions.append(Admission(now, lease.id, admitted, len(moves) if admitted else 0, plan.stats,
                                         len(stops) if admitted else 0))
        if admitted:
            sched.log.info("LSCHED", "Lease #%i admitted by the round model, moving leases %s, suspending leases %s" % (
                lease.id, [other.id for other in moves], [other.id for other in stops]))
        return admitted

    @staticmethod
    def _plan(snap: RoundSnapshot, options, hint: Plan, data) -> Plan:
        """The solver's plan of a round (one call, so that a daemon can journal its answer with the hint's
        completion, `_complete`, and replay both)."""
        from optlease.scheduling.cpsat.solve import solve_round

        return solve_round(snap, options, hint, data)


def _differs(a: LeasePlan, b: LeasePlan) -> bool:
    placed_a = a.outcome is Outcome.ACCEPTED and a.start is not None
    placed_b = b.outcome is Outcome.ACCEPTED and b.start is not None
    if placed_a != placed_b:
        return True
    return placed_a and (a.start != b.start or tuple(a.nodes) != tuple(b.nodes) or a.transfer_start != b.transfer_start)
