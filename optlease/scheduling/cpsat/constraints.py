"""The CP-SAT round model's constraint groups; each add_* states one rule and returns its objective terms."""
from __future__ import annotations

from collections import defaultdict

from ortools.sat.python import cp_model

from optlease.domain.lease import LeaseKind
from optlease.scheduling.cpsat.model import RoundModel
from optlease.scheduling.cpsat.prepare import Job, Role, always

Terms = dict[str, cp_model.LinearExprT]


def add_placement(rm: RoundModel) -> Terms:
    """Every VM of a placed tail runs on exactly one node; a VM resumed off its image's node is a migration."""
    m, migrations, transfer = rm.model, [], []
    for job in rm.data.tails:
        # the variables the model made for each candidate list: one per node outside the pools, one per pool
        # (RoundModel.split), in node and pool order
        if job.pooled:
            alone, pools = rm.split(job.candidates[0])
            counts = [rm.vms_on_node[job.id, n][0] for n in alone]
            counts += [rm.vms_in_pool[job.id, p][0] for p in pools]
            m.add(sum(counts) == job.numvms * rm.present[job.id])
            if job.origin:
                moved = job.numvms * rm.present[job.id] - sum(_kept(rm, job, n) for n in alone)
                migrations.append(moved)
                transfer.append(job.migrate * moved)
            continue
        for vm, nodes in enumerate(job.candidates):
            alone, pools = rm.split(nodes)
            xs = [rm.vm_to_node[job.id, vm, n] for n in alone]
            ys = [rm.vm_to_pool[job.id, vm, p] for p in pools]
            m.add(sum(xs) + sum(ys) == rm.present[job.id])
            if job.origin:
                for n, x in zip(alone, xs):
                    if n != job.origin[vm]:
                        migrations.append(x)
                        transfer.append(job.migrate * x)
            if job.origin:   # no image is on a pooled node: a VM resumed there is moved
                migrations.extend(ys)
                transfer.extend(job.migrate * y for y in ys)
    return {"migrations": sum(migrations), "overhead": sum(transfer)}


def _kept(rm: RoundModel, job: Job, node: int) -> cp_model.LinearExprT:
    """A counted resume's VMs that resume on `node` where their images are: the least of its count there and its
    images there (any more are moved in). Stated exactly, not only bounded (the objective would raise it), so that
    any solution's objective is the cost of the plan read from it, also where the search stops early."""
    images = job.images_on[node]
    if not images:
        return 0
    count, used = rm.vms_on_node[job.id, node]
    if count is used or images >= job.per_node(rm.data.capacity[node]):
        return count
    kept = rm.model.new_int_var(0, images, f"vms_resumed_in_place[lease={job.id},node={node}]")
    rm.model.add_min_equality(kept, [count, images])
    rm.derive(kept, lambda v: min(v(count), images))
    return kept


def _moves(rm: RoundModel, job: Job) -> cp_model.IntVar:
    """Whether a counted resume moves any VM off its image's node: it uses a node that holds none of its images or a
    pool, or puts more VMs on a node than its images there."""
    m, name = rm.model, f"lease={job.id}"
    moved = m.new_bool_var(f"moves[{name}]")
    alone, pools = rm.split(job.candidates[0])
    more = []
    for n in alone:
        count, used = rm.vms_on_node[job.id, n]
        images, most = job.images_on[n], job.per_node(rm.data.capacity[n])
        if not images:
            m.add_implication(used, moved)
            more.append(used)
        elif most > images:
            m.add(count <= images + (most - images) * moved)
            more.append(count - images)
    for p in pools:
        used = rm.vms_in_pool[job.id, p][1]
        m.add_implication(used, moved)
        more.append(used)
    rm.derive(moved, lambda v: int(any(v(e) > 0 for e in more)))
    return moved


def add_suspensions(rm: RoundModel) -> Terms:
    """A running preemptible lease is suspended at most once, so that its suspension ends as an accepted AR starts
    (or at its free end: begun at once, for waiting leases); it resumes only after the suspension (and the image's
    transfer) is over."""
    m, data = rm.model, rm.data
    ars_at: dict[int, list] = defaultdict(list)
    for job in data.jobs:
        if job.kind is LeaseKind.AR and job.has_tail and job.fixed_start is not None:
            ars_at[job.fixed_start].append(rm.present[job.id])
    overhead, preemptions = [], []
    for job in data.tails:
        present = rm.present[job.id]
        if job.role is Role.SUSPENDABLE:
            susp = rm.suspended[job.id]
            m.add(present <= susp)
            for a in job.suspend_ends:
                if a == job.free_end:
                    continue
                if not ars_at[a]:
                    m.add(rm.suspend_end[job.id, a] == 0)
                elif not any(always(p) for p in ars_at[a]):
                    m.add_bool_or(ars_at[a]).only_enforce_if(rm.suspend_end[job.id, a])
            ready = rm.suspension_end(job.id)
            m.add(rm.start[job.id] >= ready).only_enforce_if(present)
            preemptions.append(susp)
            overhead.append(job.suspend * susp)
        else:
            ready = job.earliest
        if job.pooled and job.origin and job.migrate > 0:
            m.add(rm.start[job.id] - job.migrate >= ready).only_enforce_if(_moves(rm, job))
        for vm, nodes in enumerate(job.candidates if job.origin and not job.pooled else ()):
            for n in nodes:
                mig = job.migration_time(vm, n)
                if mig > 0 and (job.id, vm, n) in rm.vm_to_node:
                    m.add(rm.start[job.id] - mig >= ready).only_enforce_if(rm.vm_to_node[job.id, vm, n])
            for p in range(len(rm.pools)):   # no image is on a pooled node
                if (job.id, vm, p) in rm.vm_to_pool and job.migrate > 0:
                    m.add(rm.start[job.id] - job.migrate >= ready).only_enforce_if(rm.vm_to_pool[job.id, vm, p])
        if job.resume > 0:
            overhead.append(job.resume * present)
    return {"preemptions": sum(preemptions), "overhead": sum(overhead)}


def add_capacity(rm: RoundModel) -> Terms:
    """On every node, at every instant, the intervals there hold at most the node's capacity of each resource."""
    by_node: dict[int, list] = defaultdict(list)
    for hold in rm.holds:
        by_node[hold.node].append(hold)
    for node, holds in by_node.items():
        capacity = rm.data.capacity[node]
        kept: list[str] = []
        for rtype in rm.data.resource_types:
            cap = capacity.get(rtype, 0)
            used = [h for h in holds if h.demand.get(rtype, 0) > 0]
            if sum(h.demand[rtype] * h.most for h in used) <= cap:
                continue
            if any(_dominated(holds, rtype, cap, other, capacity[other]) for other in kept):
                continue
            kept.append(rtype)
            rm.model.add_cumulative([h.interval for h in used], [h.demand[rtype] * h.count for h in used], cap)
    for pool in rm.pools:   # a pool's VM slots (cpsat.pools): its nodes' fixed holds, then the tails placed there
        holds = rm.pool_holds[pool.index]
        if not holds:
            continue
        # the fixed holds all begin now: what ends at one time is one interval, whichever nodes hold it (the
        # cumulative counts slots, not nodes), so a pool of 1,000 busy nodes is a staircase of a few hundred steps
        freed: dict[int, int] = defaultdict(int)
        for node in pool.nodes:
            steps = pool.blocks[node]
            for i, (end, used) in enumerate(steps):
                after = steps[i + 1][1] if i + 1 < len(steps) else 0
                if used > after and end > rm.data.now:
                    freed[end] += used - after
        intervals = [rm.model.new_fixed_size_interval_var(rm.data.now, end - rm.data.now,
                                                          f"held[pool={pool.index},until={end}]")
                     for end in sorted(freed)]
        demands = [freed[end] for end in sorted(freed)]
        for interval, count, _, _ in holds:
            intervals.append(interval)
            demands.append(count)
        rm.model.add_cumulative(intervals, demands, pool.capacity)
    return {}


def _dominated(holds: list, rtype: str, cap: int, other: str, other_cap: int) -> bool:
    """Whether no interval on the node asks for a larger share of `rtype`'s capacity than of `other`'s: then where
    the holds fit `other`, they fit `rtype` too, and its cumulative only slows the search (on a site whose VMs ask
    for CPU and memory in one proportion it halves the constraints)."""
    return all(h.demand.get(rtype, 0) * other_cap <= h.demand.get(other, 0) * cap for h in holds)


def add_exclusion(rm: RoundModel) -> Terms:
    """No two suspensions or resumptions overlap on a node (local exclusion) or anywhere (global exclusion)."""
    m, data = rm.model, rm.data
    # node (None = the whole site) -> (lease, the least demand one of its VMs holds there, how to make its operation
    # interval): a resume's intervals are made only on the nodes whose capacity does not keep operations apart
    # already (`_held_apart`: on Blue none), as unused optional intervals still cost the search
    ops: dict[int | None, list] = defaultdict(list)
    for lease, iv in rm.suspend_ops.items():
        job = data.job(lease)
        for node in ([None] if data.exclusion_global else sorted(set(job.origin))):
            ops[node].append((lease, _least(vm for vm, n in zip(job.demand, job.origin) if n == node),
                              lambda iv=iv: iv))
    for job in data.tails:
        if job.resume <= 0:
            continue
        begin = rm.start[job.id]
        if data.exclusion_global:
            present = rm.present[job.id]
            ops[None].append((job.id, {}, lambda job=job, begin=begin, present=present:
                              m.new_optional_interval_var(begin, job.resume, begin + job.resume, present,
                                                          f"resume[lease={job.id}]")
                              if not always(present) else
                              m.new_interval_var(begin, job.resume, begin + job.resume, f"resume[lease={job.id}]")))
            continue
        if job.pooled:   # counted VMs: the node's own literal says whether any resumes there
            for node in rm.split(job.candidates[0])[0]:
                ops[node].append((job.id, job.demand[0],
                                  lambda job=job, begin=begin, node=node:
                                  m.new_optional_interval_var(begin, job.resume, begin + job.resume,
                                                              rm.vms_on_node[job.id, node][1],
                                                              f"resume[lease={job.id},node={node}]")))
            continue
        on_node: dict[int, list[int]] = defaultdict(list)   # node -> the VMs that may resume there, in order
        for vm, nodes in enumerate(job.candidates):
            for n in nodes:
                if (job.id, vm, n) in rm.vm_to_node:
                    on_node[n].append(vm)
        for node in sorted(on_node):
            vms = on_node[node]
            ops[node].append((job.id, _least(job.demand[vm] for vm in vms),
                              lambda job=job, begin=begin, node=node, vms=vms: _resume_on(rm, job, begin, node, vms)))
    for node, listed in ops.items():
        if len(listed) > 1 and (node is None or not _held_apart(listed, data.capacity[node])):
            m.add_no_overlap([make() for _, _, make in listed])
    return {}


def _resume_on(rm: RoundModel, job: Job, begin, node: int, vms: list[int]) -> cp_model.IntervalVar:
    """The resume of a lease placed VM by VM on one node: present when any of its VMs resumes there."""
    m = rm.model
    xs = [rm.vm_to_node[job.id, vm, node] for vm in vms]
    used = m.new_bool_var(f"resumes_on[lease={job.id},node={node}]")
    m.add_max_equality(used, xs)
    rm.derive(used, lambda v, xs=xs: max(v(x) for x in xs))
    return m.new_optional_interval_var(begin, job.resume, begin + job.resume, used,
                                       f"resume[lease={job.id},node={node}]")


def _least(demands) -> dict[str, int]:
    """Per resource, the least of some VMs' demands (a VM that does not name a resource asks none of it)."""
    demands = list(demands)
    return {r: min(d.get(r, 0) for d in demands) for r in set().union(*demands)}


def _held_apart(listed: list, capacity: dict[str, int]) -> bool:
    """Whether the node's capacity already keeps its operations apart: each one lies within an interval of its
    lease that holds at least the listed demand on the node (a suspension within the run it ends, a resume within
    the run it begins), and no two leases' demands fit the node together, so the cumulative lets no two overlap
    (one lease's suspension ends before its resume begins). The no-overlap is then redundant (on Blue, where a VM
    fills a node, every one was)."""
    kinds: dict[tuple, set[int]] = defaultdict(set)
    for lease, demand, _ in listed:
        kinds[tuple(sorted(demand.items()))].add(lease)
    keys = list(kinds)
    for i, a in enumerate(keys):
        for b in keys[i:]:
            if a == b and len(kinds[a]) < 2:
                continue
            da, db = dict(a), dict(b)
            if not any(da.get(r, 0) + db.get(r, 0) > cap for r, cap in capacity.items()):
                return False
    return True


def add_symmetry(rm: RoundModel) -> Terms:
    """Identical untouched nodes are used in order, and identical VMs of a fresh lease take nodes in order."""
    m, data = rm.model, rm.data
    literals = rm.node_literals() if data.interchangeable else {}
    for nodes in data.interchangeable:
        nodes = tuple(n for n in nodes if n not in rm.pool_of)   # a pool has no node order to break
        used = []
        for node in nodes:
            xs = literals.get(node, [])
            u = m.new_bool_var(f"used[node={node}]")
            m.add_max_equality(u, xs) if xs else m.add(u == 0)
            rm.derive(u, lambda v, xs=xs: max((v(x) for x in xs), default=0))
            used.append(u)
        for first, second in zip(used, used[1:]):
            m.add_implication(second, first)
    for job in data.tails:
        if job.origin or job.planned_nodes or job.pooled:   # pooled VMs have no order to break
            continue
        # a VM's node number, a pool counting as -1 - its index
        index = [sum(n * rm.vm_to_node[job.id, vm, n] for n in rm.split(nodes)[0])
                 - sum((p + 1) * rm.vm_to_pool[job.id, vm, p] for p in range(len(rm.pools))
                       if (job.id, vm, p) in rm.vm_to_pool)
                 for vm, nodes in enumerate(job.candidates)]
        for vm in range(job.numvms - 1):
            if job.demand[vm] == job.demand[vm + 1] and job.candidates[vm] == job.candidates[vm + 1]:
                m.add(index[vm] <= index[vm + 1])
    return {}
