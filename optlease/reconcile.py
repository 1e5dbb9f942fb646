"""The pure reconcile step: (what runs, the plan, now) -> named buckets of VM tasks, ordered in waves.

`desired_state` reads the plan as plain reservation rows and says where each VM should be at `now` and in what state.
`reconcile` diffs that against what the hosts report and returns Nomad-style buckets plus the ordered task list.

Capacity model: only a running VM holds its host's vcpus and memory (a suspended VM's memory image is kept on the
host's disk, as in Haizea; the agent pauses it, which frees its CPUs). A host's capacity comes from its HostInfo
(`vcpus`, `memory_mb`; a missing key is unlimited).

Ordering: a task that frees room on a host (stop, suspend, a running VM migrating out) is a *leaver* there; a task
that takes room (start, resume, a running VM migrating in) is an *arriver*. Each arriver is paired with the leavers it
needs: the arrivers of a host, in a fixed order, depend on the shortest prefix of its leavers whose freed room, with
the room already free, covers every arriver up to and including it; and whatever the capacities, a task that only
leaves a host (stop, suspend) goes before every arriver there. These pairs are the edges of a networkx DiGraph
(plus suspend -> migrate -> resume of one VM); its topological generations are the waves. A task of wave k may start
only when every task of wave k-1 has succeeded, and a VM moves into a host only after what leaves it has left.

Cycles (A must leave X for B to arrive, B must leave Y for A to arrive): a 2-cycle of two running migrations between
the same two hosts with VMs of equal size becomes one `swap-with` migration (migfra exchanges both VMs in one task,
so neither host ever holds both); any other cycle is broken by suspending one of its migrating VMs on its source
(a leaver that needs nothing), migrating it suspended (which holds no room), and resuming it on its destination.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, NamedTuple

import networkx as nx

from optlease.enact.base import MIGRATE, RESUME, START, STOP, SUSPEND, HostInfo, VmTask, parse_vm_name, vm_name

RUNNING, SUSPENDED, ABSENT = "running", "suspended", "absent"
# How the state names hosts report (Enactor.running, libvirt) read in the reconcile step.
_REPORTED = {"running": RUNNING, "blocked": RUNNING, "paused": SUSPENDED, "saved": SUSPENDED,
             "pm-suspended": SUSPENDED, "suspended": SUSPENDED, "shut-off": ABSENT, "shut off": ABSENT,
             "shutoff": ABSENT, "undefined": ABSENT, "absent": ABSENT, "crashed": ABSENT}
RESOURCES = ("vcpus", "memory_mb")


class Row(NamedTuple):
    """One reservation of one VM, as plain data: kind is vm | suspend | resume | shutdown | migrate (Haizea's RR
    kinds); `origin_pnode` only for migrate (where the image comes from). Sizes default to one vcpu, no memory."""

    lease_id: int
    vnode: int
    kind: str
    start: int
    end: int
    pnode: int
    origin_pnode: int | None = None
    vcpus: int = 1
    memory_mb: int = 0


@dataclass(frozen=True)
class VmPlacement:
    host: str | None          # None only for absent
    state: str                # running | suspended | absent
    vcpus: int = 1
    memory_mb: int = 0

    def need(self) -> tuple[int, int]:
        return (self.vcpus, self.memory_mb)


# --------------------------------------------------------------------------------------------- desired state

def desired_state(rows: Iterable[Row | tuple], now: int,
                  host_of: Mapping[int, str] | None = None) -> dict[str, VmPlacement]:
    """Where each VM of the plan should be at `now`. The last reservation of a VM that has begun decides:
    vm (until its end) or resume -> running on its node; suspend or migrate -> suspended with its image on the node;
    shutdown, or a vm reservation that has ended with nothing after it -> absent. A VM none of whose reservations
    has begun is absent (and left out). `host_of` maps node ids to host names (default: the id as text)."""
    by_vm: dict[tuple[int, int], list[Row]] = {}
    for raw in rows:
        row = raw if isinstance(raw, Row) else Row(*raw)
        by_vm.setdefault((row.lease_id, row.vnode), []).append(row)
    out: dict[str, VmPlacement] = {}
    order = {"migrate": 0, "resume": 1, "vm": 2, "suspend": 3, "shutdown": 4}
    for (lease_id, vnode), vm_rows in sorted(by_vm.items()):
        begun = sorted((r for r in vm_rows if r.start <= now), key=lambda r: (r.start, order.get(r.kind, 9)))
        if not begun:
            continue
        last = begun[-1]
        host = _host(last.pnode, host_of)
        size = dict(vcpus=last.vcpus, memory_mb=last.memory_mb)
        if last.kind == "vm":
            state = RUNNING if now < last.end else ABSENT
        elif last.kind == "resume":
            state = RUNNING
        elif last.kind in ("suspend", "migrate"):
            state = SUSPENDED
        elif last.kind == "shutdown":
            state = ABSENT
        else:
            raise ValueError(f"lease {lease_id} vnode {vnode}: unknown reservation kind {last.kind!r}")
        out[vm_name(lease_id, vnode)] = VmPlacement(host if state != ABSENT else None, state, **size)
    return out


def _host(pnode: int, host_of: Mapping[int, str] | None) -> str:
    if host_of is None:
        return str(pnode)
    try:
        return host_of[pnode]
    except KeyError:
        raise ValueError(f"node {pnode} has no host name (known nodes: {sorted(host_of)})") from None


def rows_of_leases(leases: Iterable, cpu_index: int = 0, memory_index: int = 1) -> list[Row]:
    """Rows from the scheduler's Lease records (their vm reservations and the migrate/resume/suspend/shutdown
    reservations around them). CPU is in Haizea's percent (100 = one vcpu), memory in MB."""
    rows: list[Row] = []
    for lease in leases:
        for vmrr in lease.vmrrs:
            for rr in [*vmrr.pre, vmrr, *vmrr.post]:
                for vnode, pnode in rr.mapping.items():
                    demand = lease.demands.get(vnode, (100, 0))
                    origin = (rr.origin or {}).get(vnode) if rr.kind == "migrate" else None
                    rows.append(Row(lease.id, vnode, rr.kind, rr.start, rr.end, pnode, origin,
                                    max(1, math.ceil(demand[cpu_index] / 100)), int(demand[memory_index])))
    return rows


# ------------------------------------------------------------------------------------------------- the diff

@dataclass
class Buckets:
    """The diff, one bucket per kind of change, and the ordered tasks that carry it out."""

    stop: list[VmTask] = field(default_factory=list)      # running or suspended, and the plan no longer has it
    suspend: list[VmTask] = field(default_factory=list)   # running, planned suspended (or suspended to break a cycle)
    migrate: list[VmTask] = field(default_factory=list)   # planned on another host (running, or its suspended image)
    resume: list[VmTask] = field(default_factory=list)    # suspended, planned running (after a migrate if it moved)
    start: list[VmTask] = field(default_factory=list)     # not there, planned running
    ignore: list[str] = field(default_factory=list)       # already as planned (or not an optlease VM)
    lost: list[tuple[str, str]] = field(default_factory=list)  # (vm, why): on a dead or unknown host, no image, no room
    # (leaver, arriver): the stop/suspend/migration that makes room for the start/resume/migration on its host
    room: list[tuple[VmTask, VmTask]] = field(default_factory=list)
    waves: list[list[VmTask]] = field(default_factory=list)   # tasks of wave k start when wave k-1 has succeeded

    @property
    def tasks(self) -> list[VmTask]:
        """Every task in wave order (each carries its wave number)."""
        return [t for wave in self.waves for t in wave]


def placement(value, desired: VmPlacement | None) -> VmPlacement:
    """A reported (host, state) as a placement, of the size the plan gives the VM."""
    if isinstance(value, VmPlacement):
        return value
    host, state = value
    size = dict(vcpus=desired.vcpus, memory_mb=desired.memory_mb) if desired is not None else {}
    norm = _REPORTED.get(str(state).lower())
    if norm is None:
        raise ValueError(f"unknown VM state {state!r} (known: {', '.join(sorted(_REPORTED))})")
    return VmPlacement(host if norm != ABSENT else None, norm, **size)


def _capacity(info: HostInfo) -> tuple[float, float]:
    return tuple(float(info.capacity.get(r, math.inf)) for r in RESOURCES)


def reconcile(actual: Mapping[str, tuple[str, str] | VmPlacement], desired: Mapping[str, VmPlacement],
              hosts: Mapping[str, HostInfo], migration_type: str = "warm") -> Buckets:
    """The buckets and waves that take the hosts from `actual` to `desired`. Pure: inputs are never changed.
    `migration_type` (live | warm | offline) is used for running VMs; a suspended VM's image always moves warm
    (an offline migration moves only the definition of a shut-off domain)."""
    b = Buckets()
    alive = {h for h, info in hosts.items() if info.alive}
    now_on: dict[str, VmPlacement] = {}
    for vm in sorted(set(actual) | set(desired)):
        want = desired.get(vm, VmPlacement(None, ABSENT))
        have = placement(actual[vm], desired.get(vm)) if vm in actual else VmPlacement(None, ABSENT)
        ids = parse_vm_name(vm)
        if ids is None:
            b.ignore.append(vm)      # not an optlease VM: never touched
            continue
        if have.state != ABSENT and have.host not in alive:
            b.lost.append((vm, f"on {'dead' if have.host in hosts else 'unknown'} host {have.host}"))
            continue
        if want.state != ABSENT and want.host not in alive:
            b.lost.append((vm, f"planned on {'dead' if want.host in hosts else 'unknown'} host {want.host}"))
            if have.state != ABSENT:
                now_on[vm] = have
            continue
        if want.state == SUSPENDED and have.state == ABSENT:
            b.lost.append((vm, f"planned suspended on {want.host} but no host has its image"))
            continue
        if have.state != ABSENT:
            now_on[vm] = have
        if (want.state, want.host) == (have.state, have.host):
            b.ignore.append(vm)
    ops = _operations(actual, desired, now_on, b, migration_type)
    _order(ops, now_on, hosts, b)
    return b


@dataclass
class _Op:
    task: VmTask
    size: tuple[int, int]
    leaves: str | None = None      # host it frees room on
    arrives: str | None = None     # host it takes room on
    after: list["_Op"] = field(default_factory=list)   # same-VM predecessors (suspend -> migrate -> resume)


def _operations(actual, desired, now_on: dict[str, VmPlacement], b: Buckets, migration_type: str) -> list[_Op]:
    lost = {vm for vm, _ in b.lost}
    ops: list[_Op] = []
    for vm in sorted(set(actual) | set(desired)):
        if vm in lost or vm in b.ignore:
            continue
        lease_id, vnode = parse_vm_name(vm)
        want = desired.get(vm, VmPlacement(None, ABSENT))
        have = now_on.get(vm, VmPlacement(None, ABSENT))
        size = want.need() if want.state != ABSENT else have.need()
        base = dict(lease_id=lease_id, vnode=vnode, vcpus=size[0], memory_mb=size[1])

        def op(kind, host, leaves=None, arrives=None, **extra) -> _Op:
            new = _Op(VmTask(kind, host=host, **base, **extra), size, leaves, arrives)
            ops.append(new)
            return new

        if want.state == ABSENT:
            if have.state != ABSENT:
                op(STOP, have.host, leaves=have.host if have.state == RUNNING else None,
                   force=have.state == SUSPENDED)
            continue
        if have.state == ABSENT:                       # want running (suspended-from-nothing is lost)
            op(START, want.host, arrives=want.host)
            continue
        moved = have.host != want.host
        if have.state == RUNNING and want.state == RUNNING:
            op(MIGRATE, have.host, leaves=have.host, arrives=want.host, destination=want.host,
               migration_type=migration_type)
        elif have.state == RUNNING and want.state == SUSPENDED:
            first = op(SUSPEND, have.host, leaves=have.host)
            if moved:
                op(MIGRATE, have.host, destination=want.host, migration_type=_suspended_type(migration_type)
                   ).after.append(first)
        elif have.state == SUSPENDED and want.state == RUNNING:
            prev = None
            if moved:
                prev = op(MIGRATE, have.host, destination=want.host, migration_type=_suspended_type(migration_type))
            resume = op(RESUME, want.host, arrives=want.host)
            if prev is not None:
                resume.after.append(prev)
        elif have.state == SUSPENDED and want.state == SUSPENDED and moved:
            op(MIGRATE, have.host, destination=want.host, migration_type=_suspended_type(migration_type))
    return ops


def _suspended_type(migration_type: str) -> str:
    return "warm" if migration_type == "offline" else migration_type


def _fits(need, room) -> bool:
    return all(n <= r + 1e-9 for n, r in zip(need, room))


def _add(a, b, sign=1):
    return tuple(x + sign * y for x, y in zip(a, b))


def _pair(ops: list[_Op], now_on: dict[str, VmPlacement], hosts: Mapping[str, HostInfo]
          ) -> tuple[nx.DiGraph, list[_Op]]:
    """The dependency graph: same-VM chains, and each arriver after the prefix of leavers it needs.
    Returns the graph and the arrivers that do not fit even after every leaver has left."""
    graph = nx.DiGraph()
    for i, o in enumerate(ops):
        graph.add_node(i)
    index = {id(o): i for i, o in enumerate(ops)}
    for i, o in enumerate(ops):
        for p in o.after:
            graph.add_edge(index[id(p)], i)
    blocked: list[_Op] = []
    # ops and running VMs by host, looked up once: a step that starts many leases pairs each host alone
    leaving: dict[str, list[int]] = {}
    arriving: dict[str, list[int]] = {}
    stopping: dict[str, list[int]] = {}
    for i, o in enumerate(ops):
        if o.leaves:
            leaving.setdefault(o.leaves, []).append(i)
        if o.arrives:
            arriving.setdefault(o.arrives, []).append(i)
        if o.task.kind in (STOP, SUSPEND):
            stopping.setdefault(o.task.host, []).append(i)
    running_on: dict[str, list[VmPlacement]] = {}
    for p in now_on.values():
        if p.state == RUNNING and p.host in arriving:
            running_on.setdefault(p.host, []).append(p)
    for host in sorted(arriving):
        used = (0, 0)
        for p in running_on.get(host, ()):
            used = _add(used, p.need())
        free = _add(_capacity(hosts[host]), used, -1)
        # leavers that need nothing come first: pairing an arriver with them never closes a cycle
        leavers = sorted(leaving.get(host, ()), key=lambda i: (ops[i].arrives is not None, ops[i].task.vm))
        arrivers = sorted(arriving[host], key=lambda i: (ops[i].leaves is not None, ops[i].task.vm))
        freed, taken, j = (0, 0), (0, 0), 0
        for a in arrivers:
            taken_next = _add(taken, ops[a].size)
            while not _fits(taken_next, _add(free, freed)) and j < len(leavers):
                freed = _add(freed, ops[leavers[j]].size)
                j += 1
            if not _fits(taken_next, _add(free, freed)):
                blocked.append(ops[a])
                continue
            taken = taken_next
            for leaver in leavers[:j]:
                graph.add_edge(leaver, a, room=True)
        # whatever the capacities say (a host may not tell them, the plan's units may not be the host's), a stop or
        # a suspension there goes before anything arrives (a paused VM is resumed to be stopped: it takes room for a
        # moment); it needs nothing, so no cycle can form
        for leaver in stopping.get(host, ()):
            for a in arrivers:
                if not graph.has_edge(leaver, a):
                    graph.add_edge(leaver, a)
    return graph, blocked


def _order(ops: list[_Op], now_on: dict[str, VmPlacement], hosts: Mapping[str, HostInfo], b: Buckets) -> None:
    """Pair leavers with arrivers, break cycles, cut the graph into waves, fill the buckets."""
    while True:
        graph, blocked = _pair(ops, now_on, hosts)
        if blocked:
            drop = {id(o) for o in blocked}
            for o in blocked:
                b.lost.append((o.task.vm, f"no room on {o.arrives} even after every planned departure"))
            # a blocked VM's whole chain is dropped: half a move is worse than none
            vms = {o.task.vm for o in blocked}
            ops[:] = [o for o in ops if o.task.vm not in vms and id(o) not in drop]
            continue
        try:
            cycle = nx.find_cycle(graph)
        except nx.NetworkXNoCycle:
            break
        _break(ops, [ops[u] for u, _v in cycle])
    for wave_no, generation in enumerate(nx.topological_generations(graph)):
        wave = sorted((replace(ops[i].task, wave=wave_no) for i in generation), key=_task_key)
        b.waves.append(wave)
    final = {(t.kind, t.vm): t for t in b.tasks}
    for u, v, data in graph.edges(data=True):
        if data.get("room"):
            b.room.append((final[(ops[u].task.kind, ops[u].task.vm)], final[(ops[v].task.kind, ops[v].task.vm)]))
    for t in b.tasks:
        {STOP: b.stop, SUSPEND: b.suspend, MIGRATE: b.migrate, RESUME: b.resume, START: b.start}[t.kind].append(t)


def _task_key(t: VmTask):
    return (t.host, t.kind, t.lease_id, t.vnode)


def _break(ops: list[_Op], cycle: list[_Op]) -> None:
    """Break one cycle: two equal running VMs trading hosts swap; otherwise one migration goes through a suspension."""
    moves = [o for o in cycle if o.task.kind == MIGRATE and o.leaves and o.arrives]
    if not moves:     # cannot happen: only a running migration both takes and frees room
        raise AssertionError(f"a cycle without a running migration: {[o.task for o in cycle]}")
    for a in moves:
        for other in ops:
            if (other is not a and other.task.kind == MIGRATE and other.leaves == a.arrives
                    and other.arrives == a.leaves and other.size == a.size and a.task.swap_with is None
                    and other.task.swap_with is None):
                # one task on a's source: migfra exchanges a with the VM on the destination; no room changes hands
                a.task = replace(a.task, swap_with=other.task.vm)
                a.leaves = a.arrives = None
                ops.remove(other)
                return
    victim = min(moves, key=lambda o: o.task.vm)
    t = victim.task
    suspend = _Op(replace(t, kind=SUSPEND, destination=None), victim.size, leaves=victim.leaves)
    move = _Op(replace(t, migration_type=_suspended_type(t.migration_type)), victim.size, after=[suspend])
    resume = _Op(replace(t, kind=RESUME, host=t.destination, destination=None), victim.size,
                 arrives=victim.arrives, after=[move])
    at = ops.index(victim)
    ops[at:at + 1] = [suspend, move, resume]


# ------------------------------------------------------------------------------------------ applying a plan

def apply_task(state: dict[str, VmPlacement], task: VmTask) -> None:
    """What a successful task does to a placement map (used by tests and by the enactor's bookkeeping)."""
    vm = task.vm
    have = state.get(vm)
    if task.kind == START:
        state[vm] = VmPlacement(task.host, RUNNING, task.vcpus, task.memory_mb)
    elif task.kind == STOP:
        state.pop(vm, None)
    elif task.kind == SUSPEND and have is not None:
        state[vm] = replace(have, state=SUSPENDED)
    elif task.kind == RESUME and have is not None:
        state[vm] = replace(have, state=RUNNING)
    elif task.kind == MIGRATE and have is not None:
        if task.swap_with is not None and task.swap_with in state:
            other = state[task.swap_with]
            state[task.swap_with] = replace(other, host=have.host)
        state[vm] = replace(have, host=task.destination)
