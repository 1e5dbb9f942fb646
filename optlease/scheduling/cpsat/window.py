"""The round's neighbourhood (models/cpsat-round.md, *The window*): a large-neighbourhood step over the hint.

A round of the simulator or the daemon enacts only what starts before the next solved round; every start planned
later is planned again by that round. So the search is spent where it decides something: the tails the hint starts
within `window` seconds of now, where the round may suspend running leases the head of the line (`LINE_HEAD`)
unless no suspension can bring it forward (`_stuck`), every tail the hint does not place, every suspension that
something free could use (`_idle`: the others run on) and every AR or immediate lease to admit are free; every
other tail is *held* where the hint puts it: its start fixed, its presence fixed, and, where the round cannot pool
its nodes (cpsat.pools: the tails ask more than one VM demand), its nodes fixed too. A held tail still holds its
capacity in the model, so a free one can only go where the hint's later starts leave room; the plan found is a
plan of the whole round, costed by the whole round's objective.

Why it pays: each start the search moves is propagated through every cumulative it shares with the others, and
CP-SAT counts that propagation as little deterministic work; on a round of 500 queued leases over 1,000 busy
nodes the search spent 0.3-2.5 s of CPU on 0.05 deterministic seconds, and the loaded machine's wall clock then
reached the safety net. Held tails are constants to it.
"""
from __future__ import annotations

from dataclasses import replace

from optlease.scheduling.cpsat.pools import pass_on, round_pools
from optlease.scheduling.cpsat.prepare import Job, Role, RoundData
from optlease.scheduling.snapshot import LeasePlan, Outcome, Plan


# where the round may suspend running leases, the first tails of Smith's line (run over weight, the order the hint
# books in) are free wherever the hint starts them: a suspension frees room sooner than the hint assumed, and they
# are the ones it would start first
LINE_HEAD = 16


def hold_outside(data: RoundData, hint: Plan, window: int) -> tuple[RoundData, int]:
    """The round with every tail the hint starts after `now + window` held at the hint, except, where the round
    may suspend, the head of the line that a suspension could bring forward (`_stuck`); and how many were held."""
    got = hint.by_id
    tails = [j for j in data.jobs if j.has_tail]
    # nodes the model pools (cpsat.pools): a held VM the hint puts there keeps the pooled nodes it may use, so that
    # holding it splits no pool; a held VM on any other node is held there (one Boolean, not one per candidate)
    pooled = {n for pool in round_pools(data) for n in pool.nodes}
    suspends = any(j.role is Role.SUSPENDABLE for j in tails)
    head = {j.id for j in sorted((j for j in tails if j.best_effort),
                                 key=lambda j: (j.remaining / max(1, j.weight), j.id))[:LINE_HEAD]} \
        if suspends else set()
    sets: dict[int, frozenset[int]] = {}   # per candidate list (leases share a few), its nodes as a set
    outside = {j.id for j in data.tails if _outside(j, got.get(j.id), data, window, sets)}   # (only tails are held)
    if head & outside:
        head -= _stuck(data, got, head & outside, outside - head, pooled)
    idle = _idle(data, got, outside - head)
    if idle and not any(j.role is Role.SUSPENDABLE and j.id not in idle for j in tails):
        head = set()   # nothing left to suspend: the head is held after the window like any tail
    jobs, held, used, narrowed = [], 0, set(), False
    in_pools: dict[int, tuple[int, ...]] = {}   # per candidate list, its pooled nodes (one tuple, as it is shared)
    for job in data.jobs:
        if job.id in idle:   # it runs on: its nodes help no free tail sooner
            held += 1
            jobs.append(job.evolve(role=Role.FIXED, suspend_ends=(), free_end=None, deferrable=False))
            continue
        if job.id not in outside or job.id in head:
            jobs.append(job)
            continue
        p = got[job.id]
        held += 1
        # its start's domain is the hint's one second (not an AR's fixed start: its stability is still counted); a
        # resume the hint moves off its images is ready a copy earlier (the copy ends at the start, constraint 5:
        # ready at the start itself, the held tail had no solution and the round kept the hint)
        moved = job.origin and any(n != o for n, o in zip(p.nodes, job.origin))
        ready = max(job.earliest, p.start - job.migrate) if moved else p.start
        kept = dict(earliest=ready, latest=p.start, deferrable=False)
        if any(n not in pooled for n in p.nodes):
            kept["candidates"] = tuple(_in_pools(c, pooled, in_pools) if n in pooled else (n,)
                                       for n, c in zip(p.nodes, job.candidates))
            used.update(n for n in p.nodes if n not in pooled)
            narrowed = True
        jobs.append(job.evolve(**kept))
    if not held:
        return data, 0
    # a class of identical nodes is used in order (add_symmetry); a held tail on one of them names it
    classes = tuple(c for c in data.interchangeable if not used.intersection(c))
    out = replace(data, jobs=tuple(jobs), interchangeable=classes)
    if not idle and not narrowed:
        # the pools read roles, demands, images, plans and candidates, none of which holding changed: the same pools
        pass_on(data, out)
    return out, held


def _idle(data: RoundData, got: dict[int, LeasePlan], held: set[int]) -> set[int]:
    """The leases the round may suspend only for waiting ones (no AR's start ends a suspension), and the hint lets
    run on, whose suspension frees nodes nothing free could use: every lease to admit (an AR or immediate lease
    offered to the model) starts before the suspension would be over, and every best-effort start the search may
    move (not held) is placed by the hint by then too, or cannot be placed on any of the lease's nodes. Such a
    suspension could only delay the lease, so it runs on: a fixed occupancy, as a running lease that may not be
    suspended is (its waiting a constant of the neighbourhood, which `solve_round` adds back)."""
    asked = [job for job in data.jobs if job.role is Role.SUSPENDABLE and job.suspend_ends == (job.free_end,)
             and not (job.id in got and got[job.id].suspend_at is not None)]
    if not asked:
        return set()
    unions: dict[tuple, frozenset[int]] = {}   # per candidate lists (leases share a few): the nodes they reach

    def reach(candidates: tuple[tuple[int, ...], ...]) -> frozenset[int]:
        key = tuple(map(id, candidates))
        if key not in unions:
            unions[key] = frozenset().union(*{id(c): c for c in candidates}.values())
        return unions[key]

    free = [(j.fixed_start if j.optional else got[j.id].start if j.id in got else None, reach(j.candidates))
            for j in data.jobs if j.role is Role.START and (j.fixed_start is None or j.optional) and j.id not in held]
    out = set()
    for job in asked:
        over, nodes = data.now + job.suspend, set(job.origin)
        if not any((start is None or start >= over) and not nodes.isdisjoint(cands) for start, cands in free):
            out.add(job.id)
    return out


def _outside(job: Job, p: LeasePlan | None, data: RoundData, window: int, sets: dict[int, frozenset[int]]) -> bool:
    """Whether a tail may be held: a best-effort start the hint places on its candidates after the window."""
    return (job.has_tail and job.role is Role.START and not job.optional and job.fixed_start is None
            and p is not None and p.outcome is Outcome.ACCEPTED and p.start is not None
            and max(data.now + window + 1, job.earliest) <= p.start <= data.horizon
            and len(p.nodes) == job.numvms
            and all(n in _as_set(c, sets) for n, c in zip(p.nodes, job.candidates)))


def _in_pools(nodes: tuple[int, ...], pooled: set[int], memo: dict[int, tuple[int, ...]]) -> tuple[int, ...]:
    """The pooled nodes of a candidate list, found once per list (`memo` by identity, as in `_as_set`)."""
    got = memo.get(id(nodes))
    if got is None:
        got = memo[id(nodes)] = tuple(m for m in nodes if m in pooled)
    return got


def _as_set(nodes: tuple[int, ...], sets: dict[int, frozenset[int]]) -> frozenset[int]:
    """A candidate list as a set, made once per list (`sets` by identity: the lists live as long as the round)."""
    got = sets.get(id(nodes))
    if got is None:
        got = sets[id(nodes)] = frozenset(nodes)
    return got


def _stuck(data: RoundData, got: dict[int, LeasePlan], head: set[int], held: set[int],
           pooled: set[int]) -> set[int]:
    """The head tails no plan of the neighbourhood can start sooner than the hint does, whatever it suspends or
    moves: even with every suspendable lease and every free tail gone, no instant from the first suspension's end
    to the hint's start has room for the whole run among what stays put (running leases that may not be
    suspended, reservations, and held tails on their nodes, these found stuck included, in hint order). Such a tail
    could only start later, which a held tail outside the window is not let do either. Room is counted generously
    (a node is free where no single occupancy leaves too little for one VM), so no tail is held that could move up."""
    now, by_id = data.now, {j.id: j for j in data.jobs}
    first = min((j.suspend for j in data.jobs if j.role is Role.SUSPENDABLE), default=0)
    busy: dict[int, list[tuple[int, int, dict]]] = {}
    for job in data.jobs:
        if job.role is Role.FIXED:
            for vm, node in enumerate(job.origin):
                busy.setdefault(node, []).append((now, now + job.remaining + job.shutdown, job.demand[vm]))
        elif job.role is Role.START and job.fixed_start is not None and not job.optional \
                and all(len(c) == 1 for c in job.candidates):
            _occupy(busy, job, job.fixed_start, [c[0] for c in job.candidates], pooled)
        elif job.id in held:
            _occupy(busy, job, got[job.id].start, got[job.id].nodes, pooled)
    out = set()
    for lease_id in sorted(head, key=lambda i: (got[i].start, i)):
        job, p = by_id[lease_id], got[lease_id]
        if _room_before(data, job, max(now + first, job.earliest), p.start, busy):
            continue
        out.add(lease_id)
        _occupy(busy, job, p.start, p.nodes, pooled)
    return out


def _occupy(busy: dict, job: Job, start: int, nodes, pooled: set[int]) -> None:
    """A tail that stays put holds its VMs' nodes from its start (a pooled node is not named: left out)."""
    end = start + job.resume + job.remaining + job.shutdown
    for vm, node in enumerate(nodes):
        if node not in pooled:
            busy.setdefault(node, []).append((start, end, job.demand[vm]))


def _room_before(data: RoundData, job: Job, begin: int, before: int, busy: dict) -> bool:
    """Whether some instant t in [begin, before) leaves room for all the tail's VMs over [t, t + its run) on its
    candidate nodes, a node holding as many as fit in it whole unless one occupancy over that span leaves too
    little for one VM (a generous count: it may say room where there is none, never the other way)."""
    if begin >= before:
        return False
    if any(d != job.demand[0] for d in job.demand):
        return True   # VMs of several sizes: not counted, the tail stays free
    length = job.resume + job.remaining + job.shutdown
    need = job.demand[0]
    events: list[tuple[int, int]] = []
    for node in sorted(set().union(*set(job.candidates))):   # (its VMs mostly share one candidate list)
        cap = data.capacity[node]
        fit = job.per_node(cap)
        if fit <= 0:
            continue
        # starts t whose span [t, t + length) meets an occupancy that leaves no room: (a - length, b)
        blocked = sorted((a - length + 1, b) for a, b, d in busy.get(node, ())
                         if any(d.get(r, 0) + amount > cap.get(r, 0) for r, amount in need.items()))
        t = begin
        for lo, hi in blocked:
            if lo > t:
                events.append((t, fit))
                events.append((min(lo, before), -fit))
            t = max(t, hi)
            if t >= before:
                break
        if t < before:
            events.append((t, fit))
            events.append((before, -fit))
    count = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        count += delta
        if count >= job.numvms:
            return True
    return False
