"""The round's neighbourhood (models/cpsat-round.md, *The window*): a large-neighbourhood step over the hint.

A round of the simulator or the daemon enacts only what starts before the next solved round; every start planned
later is planned again by that round. So the search is spent where it decides something: the tails the hint starts
within `window` seconds of now, where the round may suspend running leases the head of the line (`LINE_HEAD`),
every tail the hint does not place, every suspension and every AR or immediate lease to admit are free; every other tail is *held* where the hint puts it: its start fixed, its presence
fixed, and, where the round cannot pool its nodes (cpsat.pools: the tails ask more than one VM demand), its
nodes fixed too. A held tail still holds its capacity in the model, so a free one can only go where the hint's
later starts leave room; the plan found is a plan of the whole round, costed by the whole round's objective.

Why it pays: each start the search moves is propagated through every cumulative it shares with the others, and
CP-SAT counts that propagation as little deterministic work; on a round of 500 queued leases over 1,000 busy
nodes the search spent 0.3-2.5 s of CPU on 0.05 deterministic seconds, and the loaded machine's wall clock then
reached the safety net. Held tails are constants to it.
"""
from __future__ import annotations

from dataclasses import replace

from optlease.scheduling.cpsat.pools import find_pools
from optlease.scheduling.cpsat.prepare import Role, RoundData
from optlease.scheduling.snapshot import Outcome, Plan


# where the round may suspend running leases, the first tails of Smith's line (run over weight, the order the hint
# books in) are free wherever the hint starts them: a suspension frees room sooner than the hint assumed, and they
# are the ones it would start first
LINE_HEAD = 16


def hold_outside(data: RoundData, hint: Plan, window: int) -> tuple[RoundData, int]:
    """The round with every tail the hint starts after `now + window` held at the hint, except, where the round
    may suspend, the head of the line; and how many were held."""
    got = hint.by_id
    tails = [j for j in data.jobs if j.has_tail]
    # nodes the model pools (cpsat.pools): a held VM the hint puts there keeps the pooled nodes it may use, so that
    # holding it splits no pool; a held VM on any other node is held there (one Boolean, not one per candidate)
    pooled = {n for pool in find_pools(data, local_exclusion=not data.exclusion_global) for n in pool.nodes}
    suspends = any(j.role is Role.SUSPENDABLE for j in tails)
    head = {j.id for j in sorted((j for j in tails if j.best_effort),
                                 key=lambda j: (j.remaining / max(1, j.weight), j.id))[:LINE_HEAD]} \
        if suspends else set()
    jobs, held, used = [], 0, set()
    for job in data.jobs:
        p = got.get(job.id)
        if not (job.has_tail and job.role is Role.START and not job.optional and job.fixed_start is None
                and job.id not in head
                and p is not None and p.outcome is Outcome.ACCEPTED and p.start is not None
                and max(data.now + window + 1, job.earliest) <= p.start <= data.horizon
                and len(p.nodes) == job.numvms
                and all(n in c for n, c in zip(p.nodes, job.candidates))):
            jobs.append(job)
            continue
        held += 1
        # its start's domain is the hint's one second (not an AR's fixed start: its stability is still counted)
        kept = replace(job, earliest=p.start, latest=p.start, deferrable=False)
        if any(n not in pooled for n in p.nodes):
            kept = replace(kept, candidates=tuple(tuple(m for m in c if m in pooled) if n in pooled else (n,)
                                                  for n, c in zip(p.nodes, job.candidates)))
            used.update(n for n in p.nodes if n not in pooled)
        jobs.append(kept)
    if not held:
        return data, 0
    # a class of identical nodes is used in order (add_symmetry); a held tail on one of them names it
    classes = tuple(c for c in data.interchangeable if not used.intersection(c))
    return replace(data, jobs=tuple(jobs), interchangeable=classes), held
