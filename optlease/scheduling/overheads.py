"""Time overheads of a lease as Haizea computes them: suspend, resume, shutdown, migration, scheduling threshold.

Suspending or resuming one VM takes memory / rate seconds (rounded up) or the override. With local exclusion the
VMs on one node go one after another and nodes work in parallel; operations that happen at the same time are one
block, and each block is charged `enactment-overhead` per VM in it. With global exclusion every VM goes alone.
"""
from __future__ import annotations

import itertools
import math

from optlease.scheduling.copyrounds import copy_rounds
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.records import Lease

FORWARD, BACKWARD = 1, -1
Block = list  # [start, end, {pnode: [vnodes]}]


def op_time(memory: int, rate: float) -> int:
    return math.ceil(memory / rate - 1e-9)


def susprem_blocks(lease: Lease, mapping: dict[int, int], t: int, direction: int, opts: SchedulingOptions,
                   suspend: bool) -> list[Block]:
    """The suspend (BACKWARD from t) or resume (FORWARD from t) blocks of a lease placed by `mapping`."""
    rate = opts.suspend_rate if suspend else opts.resume_rate
    override = opts.override_suspend if suspend else opts.override_resume
    overhead = opts.enactment_overhead

    def duration(vnode: int) -> int:
        return override if override is not None else op_time(lease.req.memory_of(vnode), rate)

    blocks: list[Block] = []
    if opts.exclusion == "global":
        cur = t
        for vnode in sorted(mapping):
            step = duration(vnode) + overhead
            if direction == FORWARD:
                blocks.append([cur, cur + step, {mapping[vnode]: [vnode]}])
                cur += step
            else:
                blocks.append([cur - step, cur, {mapping[vnode]: [vnode]}])
                cur -= step
        return blocks
    per_vnode: list[tuple[int, int, int]] = []
    by_pnode: dict[int, list[int]] = {}
    for vnode in sorted(mapping):
        by_pnode.setdefault(mapping[vnode], []).append(vnode)
    for pnode, vnodes in by_pnode.items():
        cur = t
        for vnode in vnodes:
            step = duration(vnode)
            if direction == FORWARD:
                per_vnode.append((cur, cur + step, vnode))
                cur += step
            else:
                per_vnode.append((cur - step, cur, vnode))
                cur -= step
    # Operations happening at the same time form one block (its nodes and their VMs in the order above).
    by_time: dict[tuple[int, int], dict[int, list[int]]] = {}
    for s, e, vnode in per_vnode:
        by_time.setdefault((s, e), {}).setdefault(mapping[vnode], []).append(vnode)
    for start, end in sorted(by_time):
        blocks.append([start, end, by_time[start, end]])
    for block in blocks:
        extra = overhead * sum(map(len, block[2].values()))
        if direction == FORWARD:
            block[1] += extra
        else:
            block[0] -= extra
    # Blocks must not overlap: push each one past the previous (away from t).
    if direction == FORWARD:
        blocks.sort(key=lambda b: b[0])
        for prev, cur in zip(blocks, blocks[1:]):
            if prev[1] > cur[0]:
                length = cur[1] - cur[0]
                cur[0], cur[1] = prev[1], prev[1] + length
    else:
        blocks.sort(key=lambda b: b[1], reverse=True)
        for prev, cur in zip(blocks, blocks[1:]):
            if cur[1] > prev[0]:
                length = cur[1] - cur[0]
                cur[0], cur[1] = prev[0] - length, prev[0]
    return blocks


def _estimate(lease: Lease, opts: SchedulingOptions, suspend: bool) -> int:
    """Haizea's (over)estimate of a suspension or resumption, used to size reservations before they are placed."""
    override = opts.override_suspend if suspend else opts.override_resume
    if override is not None:
        return override
    rate = opts.suspend_rate if suspend else opts.resume_rate
    one = lease.req.alike() if len(lease.demands) == lease.req.numnodes else None
    # (VMs alike: the one VM's memory, not a look at each)
    memory = one.get("Memory", 0) if one is not None else max(lease.req.memory_of(v) for v in lease.demands)
    return lease.numnodes * (op_time(memory, rate) + opts.enactment_overhead)


def serial_time(lease: Lease, opts: SchedulingOptions, suspend: bool) -> int:
    """The longest a suspension or resumption can take wherever the VMs are: one VM after another."""
    override = opts.override_suspend if suspend else opts.override_resume
    rate = opts.suspend_rate if suspend else opts.resume_rate
    one = lease.req.alike() if len(lease.demands) == lease.req.numnodes else None
    if one is not None:     # VMs alike: the same terms, summed in the same order, with no look at each VM
        each = override if override is not None else op_time(one.get("Memory", 0), rate)
        return sum(itertools.repeat(each, len(lease.demands))) + len(lease.demands) * opts.enactment_overhead
    per_vm = [override if override is not None else op_time(lease.req.memory_of(v), rate) for v in lease.demands]
    return sum(per_vm) + len(per_vm) * opts.enactment_overhead


def suspend_estimate(lease: Lease, opts: SchedulingOptions) -> int:
    if "suspend" not in lease.cache:
        lease.cache["suspend"] = _estimate(lease, opts, suspend=True)
    return lease.cache["suspend"]


def resume_estimate(lease: Lease, opts: SchedulingOptions) -> int:
    if "resume" not in lease.cache:
        lease.cache["resume"] = _estimate(lease, opts, suspend=False)
    return lease.cache["resume"]


def shutdown_time(lease: Lease, opts: SchedulingOptions) -> int:
    return lease.numnodes * (opts.shutdown_time + opts.enactment_overhead)


def migration_time(lease: Lease, opts: SchedulingOptions, images: dict[int, int] | None = None) -> int:
    """Copying the memory images (on `images`, by default where the lease's are): the node holding the most memory
    of the lease sets the pace."""
    images = lease.image_nodes if images is None else images
    if opts.migration != "yes" or not images:
        return 0
    return transfer_time(max(_memory_per_node(lease, images).values()), opts)


def _memory_per_node(lease: Lease, images: dict[int, int]) -> dict[int, int]:
    per_node: dict[int, int] = {}
    for vnode, pnode in images.items():
        per_node[pnode] = per_node.get(pnode, 0) + lease.req.memory_of(vnode)
    return per_node


def transfer_time(memory: int, opts: SchedulingOptions) -> int:
    """Copying `memory` MB at the migration bandwidth (Mbit/s), in whole seconds (rounded up)."""
    return math.ceil(memory * 8 / opts.bandwidth - 1e-9)


def migration_estimate(lease: Lease, opts: SchedulingOptions) -> int:
    """How long a greedy resume elsewhere waits for the lease's memory images (`migration: yes`): Haizea's
    conservative estimate, every VM copied one after another, each counted with all the lease's memory on its node."""
    if opts.migration != "yes" or not lease.image_nodes:
        return 0
    per_node = _memory_per_node(lease, lease.image_nodes)
    return sum(transfer_time(per_node[pnode], opts) for pnode in lease.image_nodes.values())


def migration_rounds(lease: Lease, mapping: dict[int, int], opts: SchedulingOptions) -> list[tuple[int, dict]]:
    """The copies of the memory images that must move to resume on `mapping`, in rounds (`copy_rounds`, VMs taken
    in vnode order), each round as long as its largest image: [(duration, {vnode: origin})]."""
    rounds = copy_rounds((v, lease.image_nodes[v], mapping[v]) for v in sorted(mapping)
                         if lease.image_nodes[v] != mapping[v])
    return [(transfer_time(max(lease.req.memory_of(v) for v in moves), opts), moves) for moves in rounds]


def scheduling_threshold(lease: Lease, opts: SchedulingOptions, resuming: bool) -> int:
    """The least time a lease must run once placed, so that overheads are not all it gets."""
    if opts.force_threshold is not None:
        return opts.force_threshold
    safe = suspend_estimate(lease, opts)
    if resuming:
        safe += resume_estimate(lease, opts)
    return safe + safe * opts.threshold_factor


def can_be_suspended(lease: Lease, opts: SchedulingOptions) -> bool:
    if not lease.req.preemptible or opts.suspension == "none":
        return False
    return opts.suspension == "all" or lease.numnodes == 1
