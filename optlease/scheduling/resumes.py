"""Where and when a suspended lease may resume, and the copies of its images a resume elsewhere needs (Haizea's
`migration` option: no, yes, yes-notransfer). Part of Haizea's lease scheduler (`LeaseScheduler`)."""
from __future__ import annotations

from optlease.scheduling import overheads as oh
from optlease.scheduling.records import MIGRATE, RR, Held, Lease


class Resumes:
    """The resume half of LeaseScheduler (a mixin: it needs the scheduler's table, VM scheduler, image transfers
    and options)."""

    def resumes_in_place(self, lease: Lease) -> bool:
        """Whether a suspended lease may resume only on the nodes its images are on, each VM where it was:
        `migration: no`, or under the CP-SAT mapper a lease whose disk image is managed (`migration: yes`), since
        only greedy copies disk images (over the repository's link) and a VM resumed elsewhere would find none."""
        return self.opts.migration == "no" or (
            self.opts.migration == "yes" and self.opts.mapper != "greedy" and self.prep is not None
            and self.prep.needs(lease))

    def _copies_wait(self, lease: Lease) -> int:
        """Haizea's estimate of the copies a resume elsewhere needs: its memory images, and with images managed
        (`migration: yes`, greedy: the CP-SAT round does not copy disk images yet) its disk image."""
        # fixed by where its images are (a new dict whenever they move): asked at every pass while it waits
        images, wait = lease.cache.get("copies-wait", (None, 0))
        if images is lease.image_nodes and images is not None:
            return wait
        wait = oh.migration_estimate(lease, self.opts)
        if self.prep is not None and self.opts.migration == "yes" and self.opts.mapper == "greedy":
            wait += self.prep.disk_estimate(lease)
        lease.cache["copies-wait"] = (lease.image_nodes, wait)
        return wait

    def _resume_earliest(self, lease: Lease, now: int) -> tuple[dict[int, int], int]:
        """When a suspended lease could resume on each node (`migration` yes or yes-notransfer), and when the copies
        a resume elsewhere needs would begin. Haizea: the resume waits for its estimate of the copies wherever it
        goes (one estimate for every node; with images managed, its disk image's copies count too). Managed, the
        copies go over the repository's link and begin in its first free stretch that long: the nodes its images
        are on, where it resumes with no copy, wait only for the estimate, as without the link."""
        wait = self._copies_wait(lease)
        # (the CP-SAT round books its own copies, off the link: greedy's resumes there wait as without it)
        if self.prep is None or self.opts.migration != "yes" or self.opts.mapper != "greedy":
            return dict.fromkeys(self.table.nodes, now + wait), now
        begin = self.prep.first_gap(now, wait) if wait else now
        earliest = dict.fromkeys(self.table.nodes, begin + wait)
        for pnode in (lease.image_nodes or {}).values():
            earliest[pnode] = now + wait
        return earliest, begin

    def _resume_first(self, lease: Lease, now: int) -> tuple[int, int]:
        """The earliest time `_resume_earliest` gives any node, and the time it gives every node (later where only
        the nodes its images are on have it first, while the link is busy for the copies elsewhere), without
        building its dict of every node, at each pass the lease waits. The same for every lease whose copies take
        as long."""
        wait = self._copies_wait(lease)
        if self.prep is None or self.opts.migration != "yes" or self.opts.mapper != "greedy" or not wait:
            return now + wait, now + wait
        begin = self.prep.first_gap(now, wait)
        if not lease.image_nodes:
            return begin + wait, begin + wait
        return now + wait, begin + wait

    def _image_ways(self, lease: Lease) -> frozenset | None:
        """The nodes a suspended lease's images are on (None: every node holds some of them)."""
        images, ways = lease.cache.get("image-nodes", (None, None))
        if images is not lease.image_nodes:
            ways = frozenset(lease.image_nodes.values())
            if len(ways) == len(self.table.nodes):
                ways = None
            lease.cache["image-nodes"] = (lease.image_nodes, ways)
        return ways

    def move_images(self, lease: Lease, mapping: dict[int, int], now: int) -> None:
        """Images on shared storage (`migration: yes-notransfer`): a lease booked to resume elsewhere just moves
        them, now; nothing is copied (with disk images managed, its disk image moves the same way)."""
        lease.held.append(Held(MIGRATE, now, now, dict(mapping), dict(lease.image_nodes)))
        if self.prep is not None and self.prep.needs(lease):
            lease.held.append(Held(MIGRATE, now, now, dict(mapping), dict(lease.image_nodes),
                                   extra={"what": "disk-image"}))
        lease.image_nodes = dict(mapping)
        lease.migrations += 1

    def copy_images(self, vmrr: RR, start: int, end: int) -> None:
        """Book the copy of a lease's memory images to the nodes of its resume `vmrr` (`migration: yes`) on
        [start, end), before the resume, all at once; the copy holds no node capacity."""
        vmrr.pre.insert(0, self._copy(vmrr, start, end, dict(vmrr.lease.image_nodes)))

    def copy_in_rounds(self, vmrr: RR, start: int) -> None:
        """Book the copies of the memory images that move for the resume `vmrr`, from `start`, in Haizea's rounds
        (`overheads.migration_rounds`), one after another before the resume. With disk images managed, the copies
        of the disk image where no cache holds it come first (Haizea: its preparation scheduler's migrations before
        its VM scheduler's), and every copy goes over the repository's link, whose bandwidth the schedule file
        gives it."""
        rounds = [("memory-image", r) for r in oh.migration_rounds(vmrr.lease, vmrr.mapping, self.opts)]
        link = self.prep is not None and self.opts.mapper == "greedy"
        if link and self.prep.needs(vmrr.lease):
            rounds[:0] = [("disk-image", r) for r in self.prep.disk_rounds(vmrr)]
        copies = []
        for what, (duration, moves) in rounds:
            copy = self._copy(vmrr, start, start + duration, moves)
            if link:
                copy.extra = {"what": what, "bandwidth": self.prep.opts.bandwidth}
            copies.append(copy)
            start += duration
        for i, copy in enumerate(copies):
            copy.first, copy.last = i == 0, i == len(copies) - 1
        vmrr.pre[:0] = copies

    def _copy(self, vmrr: RR, start: int, end: int, origin: dict[int, int]) -> RR:
        copy = self.vm.rr(vmrr.lease, MIGRATE, start, end, vmrr.mapping, of=vmrr)
        copy.demand = {}
        copy.origin = origin   # the images it moves: vnode -> where from
        return copy
