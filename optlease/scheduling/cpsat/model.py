"""The CP-SAT round model's variables: acceptance, starts, VM-to-node choices, suspensions and their intervals."""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import filterfalse
from typing import Callable, Union

from ortools.sat.python import cp_model

from optlease.scheduling.cpsat.pools import Pool, round_pools
from optlease.scheduling.cpsat.prepare import Job, Role, RoundData

Lit = Union[cp_model.IntVar, int]   # a literal, or the constant 1 for "always"


@dataclass
class Demand:
    """One interval that holds `demand` on `node` (the unit the capacity constraints add up)."""

    interval: cp_model.IntervalVar
    node: int
    demand: dict[str, int]                 # per VM
    count: cp_model.LinearExprT = 1        # how many VMs the interval holds
    most: int = 1                          # the largest value of `count`


@dataclass
class RoundModel:
    data: RoundData
    model: cp_model.CpModel
    present: dict[int, Lit] = field(default_factory=dict)           # lease -> its tail is placed
    start: dict[int, cp_model.LinearExprT] = field(default_factory=dict)  # lease -> when its start/resume begins
    vm_to_node: dict[tuple[int, int, int], cp_model.IntVar] = field(default_factory=dict)  # (lease, vm, node)
    # pooled leases (identical VMs): (lease, node) -> (how many VMs start or resume there, whether any does)
    vms_on_node: dict[tuple[int, int], tuple[cp_model.LinearExprT, cp_model.IntVar]] = field(default_factory=dict)
    suspend_end: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)      # (lease, time)
    suspended: dict[int, cp_model.IntVar] = field(default_factory=dict)  # lease -> suspended this round
    run_left: dict[int, cp_model.LinearExprT] = field(default_factory=dict)  # lease -> run left when the tail starts
    holds: list[Demand] = field(default_factory=list)
    suspend_ops: dict[int, cp_model.IntervalVar] = field(default_factory=dict)  # lease -> its suspension
    # node pools (cpsat.pools): one cumulative over the slots of nodes no decision tells apart
    pools: tuple[Pool, ...] = ()
    pool_of: dict[int, int] = field(default_factory=dict)                 # node -> its pool
    # (lease, vm, pool) -> VM `vm` starts in the pool (leases placed VM by VM)
    vm_to_pool: dict[tuple[int, int, int], cp_model.IntVar] = field(default_factory=dict)
    # (lease, pool) -> (how many of its identical VMs start in the pool, whether any does) (pooled leases)
    vms_in_pool: dict[tuple[int, int], tuple[cp_model.LinearExprT, cp_model.IntVar]] = field(default_factory=dict)
    # pool -> (interval, how many slots it holds, lease, vm or -1 for a count) of the tails there
    pool_holds: dict[int, list] = field(default_factory=dict)
    # helper variables and how a hint's value of each follows from the decisions' values (decode.add_hint): a hint
    # that gives every variable a value is checked at once, where a partial one costs CP-SAT a search to complete
    derived: list[tuple[cp_model.IntVar, Callable]] = field(default_factory=list)

    # lease -> (start of its own image transfer, whether it has one) (cpsat.transfers)
    transfer_starts: dict[int, tuple] = field(default_factory=dict)

    _split: dict = field(default_factory=dict)
    _tail_end: dict = field(default_factory=dict)   # lease -> its tail_end expression

    def split(self, nodes: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """A candidate list as its nodes outside every pool and the pools it reaches (leases share a few candidate
        lists, so each is split once)."""
        got = self._split.get(id(nodes))   # by identity: shared lists are one tuple, kept alive in the entry
        if got is None:
            pool_of = self.pool_of
            alone = tuple(filterfalse(pool_of.__contains__, nodes)) if pool_of else nodes
            pools = tuple(sorted(set(map(pool_of.get, nodes)) - {None})) if pool_of else ()
            got = self._split[id(nodes)] = (alone, pools, nodes)
        return got[:2]

    def derive(self, var: cp_model.IntVar, rule: Callable) -> None:
        """`rule(value)` is `var`'s value in a hinted plan, `value` reading the hint's value of any expression."""
        self.derived.append((var, rule))

    def suspension_end(self, lease: int) -> cp_model.LinearExprT:
        """When the lease's suspension ends (0 when it is not suspended)."""
        return sum(a * v for (l, a), v in self.suspend_end.items() if l == lease)

    def node_literals(self) -> dict[int, list[cp_model.IntVar]]:
        """Per node, every literal that puts a tail VM there."""
        out: dict[int, list] = {}
        for (_, _, node), x in self.vm_to_node.items():
            out.setdefault(node, []).append(x)
        for (_, node), (_, used) in self.vms_on_node.items():
            out.setdefault(node, []).append(used)
        return out

    def tail_end(self, job: Job) -> cp_model.LinearExprT:
        """When the tail's run ends (before the shutdown): one expression per lease, made when first asked (the
        model's finish, the waiting and its hint each read it; building it took longer than reading it)."""
        got = self._tail_end.get(job.id)
        if got is None:
            got = self._tail_end[job.id] = self.start[job.id] + job.resume + self.run_left[job.id]
        return got


def build_variables(data: RoundData) -> RoundModel:
    """Every decision variable and the intervals that hold resources; the add_* groups relate them."""
    rm = RoundModel(data, cp_model.CpModel())
    rm.pools = round_pools(data)
    rm.pool_of = {n: pool.index for pool in rm.pools for n in pool.nodes}
    rm.pool_holds = {pool.index: [] for pool in rm.pools}
    for job in data.jobs:
        if job.role is Role.FIXED:
            _add_fixed(rm, job)
        elif job.role is Role.SUSPENDABLE:
            _add_suspendable_head(rm, job)
        if job.has_tail:
            _add_tail(rm, job)
    return rm


def _add_fixed(rm: RoundModel, job: Job) -> None:
    length = job.remaining + job.shutdown
    if length <= 0:
        return
    for vm, node in enumerate(job.origin):
        if node in rm.pool_of:
            continue   # the pool's staircase holds it (add_capacity): an interval here would be in no constraint
        iv = rm.model.new_fixed_size_interval_var(rm.data.now, length, f"run[lease={job.id},vm={vm + 1}]")
        rm.holds.append(Demand(iv, node, job.demand[vm]))


def _add_suspendable_head(rm: RoundModel, job: Job) -> None:
    m, now = rm.model, rm.data.now
    for a in job.suspend_ends:
        rm.suspend_end[job.id, a] = m.new_bool_var(f"suspend_end[lease={job.id},t={a}]")
    susp = m.new_bool_var(f"suspended[lease={job.id}]")
    m.add(susp == sum(v for (l, _), v in rm.suspend_end.items() if l == job.id))
    rm.suspended[job.id] = susp
    full = now + job.remaining + job.shutdown
    if len(job.suspend_ends) == 1:
        _add_one_end_head(rm, job, susp, full)
        return
    # the run goes on until its suspension ends, or to its end and shutdown
    head_end = m.new_int_var(now, full, f"head_end[lease={job.id}]")
    m.add(head_end == full - full * susp + rm.suspension_end(job.id))
    rm.derive(head_end, lambda v: v(full - full * susp + rm.suspension_end(job.id)))
    for vm, node in enumerate(job.origin):
        iv = m.new_interval_var(now, head_end - now, head_end, f"head[lease={job.id},vm={vm + 1}]")
        rm.holds.append(Demand(iv, node, job.demand[vm]))
    if job.suspend > 0:
        first = min(job.suspend_ends) - job.suspend
        begin = m.new_int_var(first, max(job.suspend_ends) - job.suspend, f"suspend_at[lease={job.id}]")
        m.add(begin == rm.suspension_end(job.id) - job.suspend * susp + first * (1 - susp))
        rm.derive(begin, lambda v: v(rm.suspension_end(job.id) - job.suspend * susp + first * (1 - susp)))
        rm.suspend_ops[job.id] = m.new_optional_interval_var(begin, job.suspend, begin + job.suspend, susp,
                                                             f"suspend[lease={job.id}]")


def _add_one_end_head(rm: RoundModel, job: Job, susp: cp_model.IntVar, full: int) -> None:
    """A lease with one suspension end `a` (the round's free end) holds its nodes until `a` in any case and from
    `a` to its end unless it is suspended: fixed-size intervals, where a head of variable length costs every
    cumulative it is in far more propagation. A suspension that would end after the run and shutdown is none."""
    m, now, a = rm.model, rm.data.now, job.suspend_ends[0]
    if a > full:
        m.add(susp == 0)
    for vm, node in enumerate(job.origin):
        if min(a, full) > now:
            iv = m.new_fixed_size_interval_var(now, min(a, full) - now, f"head[lease={job.id},vm={vm + 1}]")
            rm.holds.append(Demand(iv, node, job.demand[vm]))
        if full > a:
            iv = m.new_optional_fixed_size_interval_var(a, full - a, ~susp, f"runs_on[lease={job.id},vm={vm + 1}]")
            rm.holds.append(Demand(iv, node, job.demand[vm]))
    if job.suspend > 0:
        rm.suspend_ops[job.id] = m.new_optional_fixed_size_interval_var(a - job.suspend, job.suspend, susp,
                                                                        f"suspend[lease={job.id}]")


def _add_tail(rm: RoundModel, job: Job) -> None:
    m, data = rm.model, rm.data
    name = f"lease={job.id}"
    one_end = job.role is Role.SUSPENDABLE and len(job.suspend_ends) == 1
    if one_end:   # resumed only after its one suspension: the run left then is a constant
        rm.present[job.id] = m.new_bool_var(f"resumed[{name}]")
        a = job.suspend_ends[0]
        rm.run_left[job.id] = job.remaining - (a - job.suspend - data.now) * rm.suspend_end[job.id, a]
    elif job.role is Role.SUSPENDABLE:
        rm.present[job.id] = m.new_bool_var(f"resumed[{name}]")
        # intervals take one variable per field: the run left after the suspension gets its own
        left = m.new_int_var(1, job.remaining, f"run_left[{name}]")
        m.add(left == job.remaining - sum(
            (a - job.suspend - data.now) * rm.suspend_end[job.id, a] for a in job.suspend_ends))
        rm.derive(left, lambda v: v(job.remaining - sum(
            (a - job.suspend - data.now) * rm.suspend_end[job.id, a] for a in job.suspend_ends)))
        rm.run_left[job.id] = left
    elif job.optional:
        rm.present[job.id] = m.new_bool_var(f"accepted[{name}]")
        rm.run_left[job.id] = job.remaining
    elif job.deferrable or job.earliest > data.horizon:
        rm.present[job.id] = m.new_bool_var(f"placed[{name}]")
        rm.run_left[job.id] = job.remaining
    else:
        rm.present[job.id] = 1
        rm.run_left[job.id] = job.remaining
    if job.fixed_start is not None:
        rm.start[job.id] = job.fixed_start
    elif job.earliest > data.horizon:
        rm.start[job.id] = data.horizon + 1
        m.add(rm.present[job.id] == 0)
    else:
        last = data.horizon if job.latest is None else max(job.earliest, min(data.horizon, job.latest))
        rm.start[job.id] = m.new_int_var(job.earliest, last, f"start[{name}]")
    # a VM resumed off its image's node has its image copied before the start (add_suspensions); the copy holds no
    # node's capacity, as the slot table books it
    if one_end:
        size = job.resume + job.rem_after(job.suspend_ends[0], data.now) + job.shutdown
        finish = rm.start[job.id] + size
    elif job.role is Role.SUSPENDABLE:
        # interval fields are affine: the finish of a run whose length varies is a variable of its own
        finish = m.new_int_var(job.earliest, data.horizon + job.resume + job.remaining + job.shutdown,
                               f"finish[{name}]")
        m.add(finish == rm.tail_end(job) + job.shutdown)
        rm.derive(finish, lambda v: v(rm.tail_end(job) + job.shutdown))
        most = job.resume + job.remaining + job.shutdown
        size = m.new_int_var(0, most, f"tail_size[{name}]")
        rm.derive(size, lambda v: min(most, max(0, v(finish) - v(rm.start[job.id]))))
    else:
        size = job.resume + job.remaining + job.shutdown
        finish = rm.tail_end(job) + job.shutdown
    if job.pooled:
        _add_pooled(rm, job, size, finish)
        return
    for vm, nodes in enumerate(job.candidates):
        alone, pools = rm.split(nodes)
        for node in alone:
            x = m.new_bool_var(f"vm_to_node[{name},vm={vm + 1},node={node}]")
            rm.vm_to_node[job.id, vm, node] = x
            iv = m.new_optional_interval_var(rm.start[job.id], size, finish, x,
                                             f"tail[{name},vm={vm + 1},node={node}]")
            rm.holds.append(Demand(iv, node, job.demand[vm]))
        for p in pools:
            y = m.new_bool_var(f"vm_to_pool[{name},vm={vm + 1},pool={p}]")
            rm.vm_to_pool[job.id, vm, p] = y
            iv = m.new_optional_interval_var(rm.start[job.id], size, finish, y, f"tail[{name},vm={vm + 1},pool={p}]")
            rm.pool_holds[p].append((iv, 1, job.id, vm))


def _add_pooled(rm: RoundModel, job: Job, size: cp_model.LinearExprT, finish: cp_model.LinearExprT) -> None:
    """Identical VMs (cpsat.prepare, Job.pooled): per candidate node, how many start or resume there, and one
    interval holding them all."""
    m, name = rm.model, f"lease={job.id}"
    alone, pools = rm.split(job.candidates[0])
    for p in pools:
        used = m.new_bool_var(f"uses_pool[{name},pool={p}]")
        most = min(job.numvms, rm.pools[p].capacity)
        count = _vm_count(m, used, most, f"vms_in_pool[{name},pool={p}]")
        rm.vms_in_pool[job.id, p] = (count, used)
        iv = m.new_optional_interval_var(rm.start[job.id], size, finish, used, f"tail[{name},pool={p}]")
        rm.pool_holds[p].append((iv, count if most > 1 else 1, job.id, -1))
    for node in alone:
        used = m.new_bool_var(f"uses_node[{name},node={node}]")
        most = job.per_node(rm.data.capacity[node])
        count = _vm_count(m, used, most, f"vms_on_node[{name},node={node}]")
        rm.vms_on_node[job.id, node] = (count, used)
        iv = m.new_optional_interval_var(rm.start[job.id], size, finish, used, f"tail[{name},node={node}]")
        # the interval is present exactly when the node is used: one VM is a constant demand (a variable demand in a
        # cumulative costs CP-SAT far more propagation)
        rm.holds.append(Demand(iv, node, job.demand[0], count if most > 1 else 1, most))


def _vm_count(m: cp_model.CpModel, used: cp_model.IntVar, most: int, label: str) -> cp_model.LinearExprT:
    """How many of a lease's VMs go to one node or pool: `used` itself when at most one fits there (no variable to
    propagate), else a count in 1..most when used and 0 when not."""
    if most == 1:
        return used
    count = m.new_int_var(0, most, label)
    m.add(count <= most * used)
    m.add(count >= used)
    return count
