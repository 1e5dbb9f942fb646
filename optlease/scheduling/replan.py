"""When a lease's run differs from its booking: it ends before its reservation does (the leases booked for the
future are booked again, as Haizea does), or it runs past the estimate it was booked for (its booking grows, and
later best-effort bookings in the way go back to the queue). Part of Haizea's lease scheduler (`LeaseScheduler`)."""
from __future__ import annotations

from optlease.domain.lease import LeaseKind, LeaseState
from optlease.formats.timefmt import MAX_SECONDS
from optlease.scheduling import overheads as oh
from optlease.scheduling.mapper import vms_of
from optlease.scheduling.records import MIGRATE, RESUME, SUSPEND, RR, Lease, NotSchedulable
from optlease.scheduling.slottable import fits, vsub

S = LeaseState


class Replanning:
    """Premature ends and overruns for LeaseScheduler (a mixin: it needs the scheduler's table, VM scheduler,
    options, log, `leases`, `schedule_lease`, `enqueue`, `finish`, `end_rr`, `cancel_vmrr` and `preempt`)."""

    def premature_end(self, lease: Lease, now: int) -> None:
        vmrr = lease.last_vmrr()
        if self.log.info_on:
            self.log.info("VMSCHED", "LEASE-%i The VM has ended prematurely." % lease.id)
        for rr in vmrr.post:
            self.table.remove(rr)
            rr.state = "cancelled"
        vmrr.post = []
        self.table.cut(vmrr, now, prune=True)
        self.end_rr(vmrr, now)
        self.finish(lease, now)
        self.reevaluate(now)

    def reevaluate(self, now: int) -> None:
        """After a premature end: leases booked for the future may now start earlier, so they are booked again
        (Haizea: back to the queue where they no longer fit)."""
        # only leases with a backfilled reservation in the table can qualify
        booked = {rr.lease.id: rr.lease for rr in self.table.backfills}
        future = [lease for lease in booked.values() if self.leases.get(lease.id) is lease
                  and lease.state in (S.SCHEDULED, S.SUSPENDED_SCHEDULED, S.MIGRATING)
                  and lease.last_vmrr().backfill and lease.last_vmrr().state == "scheduled"
                  and self._replannable(lease)]
        future.sort(key=lambda lease: (lease.last_vmrr().start, lease.id))
        limited = self.opts.max_in_future != -1
        for i, lease in enumerate(future):
            # Each is booked again before those that start after it, which are booked again next: the backfilling
            # limit counts the bookings made so far, not theirs. (Greedy never holds more bookings than the limit,
            # so none of its leases is refused for theirs; a planner's bookings may be more, and the earliest
            # booking is then not the one lost to a later one's.)
            later = sum(1 for other in future[i + 1:] if other.last_vmrr().backfill) if limited else 0
            self.vm.future_count -= later
            try:
                self._book_again(lease, now)
            finally:
                self.vm.future_count += later

    def _book_again(self, lease: Lease, now: int) -> None:
        """`reevaluate`'s new booking of one lease booked for the future (or its way back to the queue)."""
        if self._books_again(lease, now):
            self._booked_again(lease, now)
            return
        self.cancel_vmrr(lease.last_vmrr(), now)
        lease.vmrrs.pop()
        if lease.state is S.MIGRATING:
            lease.set_state(S.SUSPENDED_SCHEDULED)   # the copy under way is given up: its image stays put
        lease.set_state(S.SUSPENDED_PENDING if lease.state is S.SUSPENDED_SCHEDULED else S.PENDING)
        try:
            self.schedule_lease(lease, now)
        except NotSchedulable:
            lease.set_state(S.SUSPENDED_QUEUED if lease.state is S.SUSPENDED_PENDING else S.QUEUED)
            self.enqueue(lease)

    def _books_again(self, lease: Lease, now: int) -> bool:
        """Whether booking a lease booked for the future again now would give exactly the booking it has, found
        without taking it out: a best-effort lease that starts afresh (its image's transfers, when images are
        managed, aside: `_booked_again` books them again for real) or resumes where its memory image is (images not
        managed), booked for the time it asked for, by a built-in host policy, whose booking `schedule_lease` made
        at a mark of the table. That booking begins at s, the first of its tries where the site as a whole had room
        and the mapper placed it."""
        vmrr = lease.last_vmrr()
        seen = lease.cache.get("booked")
        if seen is None or seen[0] != vmrr.seq or lease.kind is not LeaseKind.BEST_EFFORT \
                or self.opts.runtime_estimate != "requested" or not self.policies.builtin_hosts:
            return False
        start, table = vmrr.begin(), self.table
        limit = self.opts.max_in_future
        if start <= now or (limit != -1 and self.vm.future_count - 1 >= limit):
            return False
        if lease.state is S.SUSPENDED_SCHEDULED:
            if self.prep is not None:
                return self._resumes_again_over_link(lease, vmrr, seen, now)
            return self._resumes_again(lease, vmrr, seen[1], now)
        # Starting afresh: when no change since the mark reaches past s, the table from s on is what the mapper
        # saw (its answer at s depends on nothing earlier); when the site as a whole, without the booking, first
        # has room from now at s exactly, and a reservation still ends at s, every earlier try fails the site's
        # room test and the try at s comes.
        if lease.state is not S.SCHEDULED or vmrr.pre:
            return False
        if self.prep is not None and self.prep.needs(lease):
            return self._starts_again_with_image(lease, vmrr, seen[2], now)
        if not table.unchanged_from(seen[1], start) and not self._passed_over(lease, vmrr, seen[1], start):
            return False
        return start in table.ends and table.earliest_total_room_without(
            (vmrr, *vmrr.post), now, self.vm.shape(lease, False)[-1], lease.total_demand) == start

    def _passed_over(self, lease: Lease, vmrr: RR, mark: tuple, start: int, only: set[int] | None = None) -> bool:
        """Whether the mapper's answer at s (`start`) for a lease that starts afresh is the one it gave at the mark,
        though changes since then reach past s: each changed only nodes off the booking that the walk at s does not
        reach now, where its smallest VM has no room at s, or whose key in the host policy's order (-score, rank)
        comes after the node that took its last VM then (`VMScheduler._note_walk`). The walk asks only the nodes
        with room for that VM at s, each by its own usage and reservations from s on, in that order: the changed
        nodes took none of its VMs at the mark (not in its booking), a node that takes none leaves the walk as it
        was (the VMs still to place, the end reached so far), and every other node is asked what it was asked.
        `only`: the nodes the try at s asks (its image there by then), as it asked them at the mark (None: all)."""
        table, policies = self.table, self.policies
        changes = table.changed_past(mark, start)
        if changes is None or table.down:
            return False
        changed = set().union(*changes)
        # (its demand walked, not asked: a wide demand's membership, once asked, would be kept with its history)
        if not changed.isdisjoint(vmrr.demand):
            return False
        if only is not None:
            changed &= only
        # the changed nodes the walk at s asks (the table's own question, asked once per profile)
        asked = table.nodes_with_room(vms_of(lease)[0], start, list(changed))
        if not asked:
            return True
        walked = lease.cache.get("walked")
        if walked is None or walked[0] != vmrr.seq:
            return False
        bound, rank, by_node, profiles = walked[1], table.rank, table.by_node, table.profiles
        scores = {}     # (nodes that share a profile, a capacity and reservations score alike)
        for node in asked:
            key = (profiles[node], table.caps[node], by_node[node])
            score = scores.get(key)
            if score is None:
                score = scores[key] = policies.score_hosts([node], start, lease, table)[0][0]
            if (-score, rank[node]) <= bound:
                return False
        return True

    def _starts_again_with_image(self, lease: Lease, vmrr: RR, before: dict[int, int], now: int) -> bool:
        """`_books_again` for a lease that starts afresh and whose image is managed, once no change since the mark
        reaches past its start s. Booking it again gives up its transfers (those that feed it alone leave the
        link), then tries from the earliest time any node could have its image (`ImageTransfers.earliest`), each
        try on the nodes that could have it by then (`before`: when each could, as it was placed); the rule is
        `_tried_again`'s."""
        prep, start = self.prep, vmrr.start
        if before is None or start > now + MAX_SECONDS:
            return False
        gone = prep.given_up(lease)
        times = prep.earliest(lease, now, gone).times
        return self._tried_again(lease, start, (vmrr, *vmrr.post), gone, before, times, False)

    def _resumes_again(self, lease: Lease, vmrr: RR, mark: tuple, now: int) -> bool:
        """`_books_again` for a lease that resumes in place. Its tries are at now and at the ends of the
        reservations on its own nodes, each asks those nodes alone, and a try fails at once where one of them has
        no room for its VMs at that instant (the site's room test, which a placement on them passes, only skips
        tries that fail). Every try before s fails when one of its nodes has no room from now until s, or when no
        change since the mark that reaches past now changed its nodes (each such try was made then, and failed)
        and one has no room now. The try at s comes, and places it as it did, when a reservation on its nodes
        still ends at s, the site without the booking has room from s, and no change since the mark that reaches
        past s changed its nodes."""
        table = self.table
        nodes = set(vmrr.mapping.values())
        # (the log's line names an end the booking does not keep: booked again where it is written)
        if self.log.info_on or table.down or not self.resumes_in_place(lease) or vmrr.mapping != lease.image_nodes \
                or any(rr.kind != RESUME for rr in vmrr.pre):
            return False
        start, caps, profiles, demand = vmrr.begin(), table.caps, table.profiles, vmrr.demand
        booking = {*vmrr.pre, vmrr, *vmrr.post}    # (a resume that takes no time ends at s: not a try)
        if not table.untouched_from(mark, start, nodes) \
                or not any(rr.end == start and rr not in booking for p in nodes for rr in table.by_node[p]):
            return False
        alike = {(profiles[p], caps[p], demand[p]) for p in nodes}     # (nodes alike are asked once)
        if not any(prof.earliest_room(now, 1, need, cap) >= start for prof, cap, need in alike) and not (
                table.untouched_from(mark, now, nodes)
                and not all(fits(need, vsub(cap, prof.at(now))) for prof, cap, need in alike)):
            return False
        return table.earliest_total_room_without((*vmrr.pre, vmrr, *vmrr.post), start, self.vm.shape(lease, True)[-1],
                                                 lease.total_demand) == start

    def _resumes_again_over_link(self, lease: Lease, vmrr: RR, seen: tuple, now: int) -> bool:
        """`_books_again` for a suspended lease that may resume on other nodes than its images are on, after copies
        of them over the repository's link (`migration: yes`, greedy, images managed). Booking it again takes its
        copies off the link and tries from when copies could be over on its own nodes (now plus their estimate),
        each try on the nodes it may resume on by then: its own until a stretch of the link long enough for the
        copies is over, every node from then on (`_resume_earliest`; placed elsewhere before that, it is booked
        again from then on every node). It was placed at s, its resume's start (`seen`: the booking's number,
        mark, and from when each node could take it). The try at s places it as it did when the nodes it may
        resume on by then are the ones it could when it was placed (the mapper is asked what it was asked, of the
        same table from s on), and no second booking follows (in place, or every node by s): `_tried_again`. Its
        copies are then booked again for real (`_booked_again`)."""
        table, before = self.table, seen[2]
        # (the log's line names the mapper's end, which the booking does not keep: booked again where it is written)
        if self.log.info_on or before is None or self.opts.migration != "yes" or self.opts.mapper != "greedy" \
                or any(rr.state != "scheduled" for rr in vmrr.pre):
            return False
        copies = [rr for rr in vmrr.pre if rr.kind == MIGRATE]
        resumes = [rr for rr in vmrr.pre if rr.kind == RESUME]
        in_place = vmrr.mapping == lease.image_nodes
        if not resumes or len(copies) + len(resumes) != len(vmrr.pre) or in_place == bool(copies):
            return False
        start = resumes[0].start
        if start > now + MAX_SECONDS:
            return False
        wait = self._copies_wait(lease)
        ready = (self.prep.first_gap(now, wait, set(copies)) if wait else now) + wait
        if not in_place and ready > start:
            return False
        times = dict.fromkeys(table.nodes, ready)    # (as `_resume_earliest` has them, its copies off the link)
        for pnode in (lease.image_nodes or {}).values():
            times[pnode] = now + wait
        return self._tried_again(lease, start, (*vmrr.pre, vmrr, *vmrr.post), (), before, times, True)

    def _tried_again(self, lease: Lease, start: int, booking: tuple, gone, before: dict[int, int],
                     times: dict[int, int], resuming: bool) -> bool:
        """Whether booking a lease again, its booking (and `gone`, the transfers that leave the link with it) taken
        out, tries each start from the earliest of `times` on as it did when it was placed from `before` (when each
        node could take it, then and now), and its first try that places it is at `start` again, with the same
        answer. Let E be how far the changes to the table since its mark reach, and R the first instant from the
        earliest of `times` at which the site as a whole, without the booking, has room for it: every try before R
        fails the site's room test. The tries from R on, to `start` included, ask the mapper what they asked then
        (the same nodes by `_tried_on`, from either `times` or `before`), of the same table from their instant on
        when E is before R (E before `start` when R is `start`). A try in between was made then, and failed, when
        it is an end of a reservation (those after E are the ones there were) or one of the times it was placed
        from, not before the first of them. `start` is a try: a reservation other than the booking's ends there,
        and it is not one of `times` (the booking stays one for the future)."""
        table = self.table
        left = {*booking, *gone}
        if start in times.values() or all(rr in left for rr in table.ending.get(start, ())):
            return False
        reach = table.changed_until(self._mark(lease))
        if reach is None or reach > start and resuming:
            return False
        room = table.earliest_total_room_without(booking, min(times.values()), self.vm.shape(lease, resuming)[-1],
                                                 lease.total_demand)
        if reach > start:
            # changes reach past s: only the try at s comes (the site's room test rules out every earlier one), and
            # the nodes they changed are ones its walk passes over (`_passed_over`)
            if room != start or not self._passed_over(lease, lease.last_vmrr(), self._mark(lease), start,
                                                      self._tried_on(times, start)):
                return False
        elif room > start or (room < start and (room <= reach or room < min(before.values()))):
            return False
        steps = {room, *(t for t in {*times.values(), *before.values()} if room < t <= start)}
        if any(self._tried_on(times, t) != self._tried_on(before, t) for t in steps):
            return False
        placed_from = set(before.values())
        return all(t in placed_from or not all(rr in left for rr in table.ending.get(t, ()))
                   for t in set(times.values()) if room <= t < start)

    @staticmethod
    def _mark(lease: Lease) -> tuple[int, int]:
        return lease.cache["booked"][1]

    def _tried_on(self, times: dict[int, int], t: int) -> set[int] | None:
        """The nodes a try at t asks the mapper about, for a lease that may start on each node from `times` on
        (`VMScheduler.asap`; None: every node)."""
        if len(times) == len(self.table.nodes) and t >= max(times.values()):
            return None
        nodes = {n for n, e in times.items() if e <= t}
        return None if len(nodes) == len(self.table.nodes) else nodes

    def _booked_again(self, lease: Lease, now: int) -> None:
        """What booking the lease again leaves that its kept booking does not have: reservations newer than every
        other, in the order booking makes them (their order at an instant), and the log's line. With images
        managed, the room its reservations would give back is counted, and what goes over the link is booked again
        for real, after its reservations: a lease that starts afresh gets its image's transfers, a resume elsewhere
        the copies of its images (they may move: an earlier stretch of the link, a cache that took its image in, a
        transfer to ride on)."""
        vmrr, table, prep = lease.last_vmrr(), self.table, self.prep
        seen = vmrr.seq
        afresh = prep is not None and lease.state is S.SCHEDULED and prep.needs(lease)
        copies = [rr for rr in vmrr.pre if rr.kind == MIGRATE]
        for rr in copies:
            table.remove(rr)
            rr.state = "cancelled"
        vmrr.pre = [rr for rr in vmrr.pre if rr.kind != MIGRATE]
        if prep is not None:
            table.count_as_rebooked((vmrr, *vmrr.pre, *vmrr.post))
            prep.release(lease)
        walked = lease.cache.get("walked")
        for rr in (vmrr, *vmrr.pre, *vmrr.post):
            rr.seq = table.next_seq()
        if walked is not None and walked[0] == seen:    # (its walk ends where it did: renumbered with it)
            lease.cache["walked"] = (vmrr.seq, walked[1])
        times = None    # from when each node could take it (what booking it again notes)
        if afresh:
            ready = prep.earliest(lease, now)
            times = ready.times
            prep.commit(prep.plan(lease, vmrr, ready, now), vmrr)
        elif prep is not None and lease.state is S.SUSPENDED_SCHEDULED:
            times, begin = self._resume_earliest(lease, now)
            if copies:      # (after the resume's reservations, as booking makes them, from the link's first stretch)
                self.copy_in_rounds(vmrr, begin)
                for rr in vmrr.pre:
                    if rr.kind == MIGRATE:
                        table.add(rr)
        if table.changed is not None:
            table.changed.add(lease)
        lease.cache["booked"] = (vmrr.seq, table.mark(), times)
        if self.log.info_on:    # (a lease that starts afresh: its booking ends where the mapper's placement does)
            self.log.info("VMSCHED", "Lease #%i can be scheduled on nodes %s from %s to %s%s" % (
                lease.id, vmrr.nodes(), self.log.t(vmrr.start), self.log.t(vmrr.post[-1].end),
                " (suspending)" if vmrr.post[0].kind == SUSPEND else ""))

    @staticmethod
    def _replannable(lease: Lease) -> bool:
        """Whether a future booking may be booked again after a premature end: nothing of it has begun but copies
        of its memory images (Haizea: the lease stays suspended-scheduled while they run; the copies done stay
        done, the one under way is given up)."""
        return all(rr.state == "scheduled" or rr.kind == MIGRATE for rr in lease.last_vmrr().pre)

    def overrun(self, vmrr: RR, now: int) -> int | None:
        """A lease still runs where the run-time estimate it was booked for runs out (its booking's checkpoint): its
        booking grows to the whole time it asked for. Bookings not yet begun of best-effort leases that arrived after
        it and are in the way go back to the queue (this instant's round books them again); before anything else in
        the way (an AR, a lease ahead of it in line) it is suspended, in the margin its booking kept for that: an
        estimate never pushes back a lease that came first. Returns when the lease really ends, if that is after the
        old booking and before the new one (None otherwise)."""
        lease, old_end = vmrr.lease, vmrr.end
        vmrr.checkpoint = None
        lease.overruns += 1
        self.log.info("LSCHED", "Lease #%i runs past its estimate: booking the rest of its requested time." % lease.id)
        for rr in vmrr.post:
            self.table.remove(rr)
            rr.state = "cancelled"
        vmrr.post = []
        self.table.remove(vmrr)
        shutdown = oh.shutdown_time(lease, self.opts)
        end = vmrr.start + lease.remaining()
        free = self._clear_way(vmrr, now, end + shutdown)
        vmrr.end = min(end, free)
        self.table.add(vmrr)
        if free >= end + shutdown:
            self.vm.add_shutdown(vmrr, shutdown)
            self.table.add(vmrr.post[0])
        else:
            self.preempt(lease, free, now)
        real_end = vmrr.start + lease.real_remaining()
        return real_end if old_end <= real_end < vmrr.end and vmrr.state == "active" else None

    def _clear_way(self, vmrr: RR, now: int, until: int) -> int:
        """Send back to the queue the bookings not yet begun of best-effort leases that arrived after `vmrr`'s and keep
        it (out of the table) from holding its nodes until `until`, first in the way first; returns from when it no
        longer fits (>= until: it fits)."""
        table = self.table
        while True:
            free, node = min((table.profiles[p].first_exceeding(now, d, table.caps[p]), p)
                             for p, d in vmrr.demand.items())
            if free >= until:
                return free
            way = sorted({rr.lease for rr in table.by_node[node] if rr.start <= free < rr.end and rr.demand},
                         key=lambda lease: lease.id)
            line = (vmrr.lease.req.arrival, vmrr.lease.id)
            movable = [other for other in way if other is not vmrr.lease and self._not_begun(other)
                       and (other.req.arrival, other.id) > line]
            if not movable or len(movable) < len(way):
                return free   # something in the way stays: an AR, an immediate lease, a lease under way or ahead
            for other in movable:
                booking = other.last_vmrr()
                self.cancel_vmrr(booking, now)
                other.vmrrs.pop()
                other.set_state(S.SUSPENDED_QUEUED if other.state is S.SUSPENDED_SCHEDULED else S.QUEUED)
                self.enqueue(other)
                self.log.info("LSCHED", "Lease #%i goes back to the queue: lease #%i runs on." % (
                    other.id, vmrr.lease.id))

    @staticmethod
    def _not_begun(lease: Lease) -> bool:
        vmrr = lease.last_vmrr()
        return lease.kind is LeaseKind.BEST_EFFORT and lease.state in (S.SCHEDULED, S.SUSPENDED_SCHEDULED) \
            and vmrr is not None and all(rr.state == "scheduled" for rr in (*vmrr.pre, vmrr, *vmrr.post))
