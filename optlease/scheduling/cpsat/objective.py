"""The round objective: its CP-SAT terms (refusals, best-effort waiting, stability) and the same cost of any Plan."""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from optlease.scheduling.cpsat.prepare import Role, RoundData, always
from optlease.scheduling.cpsat.transfers import plan_seconds
from optlease.scheduling.snapshot import LeasePlan, Outcome, Plan, Weights

if TYPE_CHECKING:   # solver-free at run time: plan_cost serves the MIP cross-check too
    from ortools.sat.python import cp_model

    from optlease.scheduling.cpsat.model import RoundModel

Terms = dict
TERM_NAMES = ("rejected", "wait", "preemptions", "migrations", "overhead", "stability_time", "stability_nodes",
              "transfer")


def add_acceptance(rm: RoundModel) -> Terms:
    """A new AR or immediate lease is accepted or refused whole; a refusal costs its node-seconds."""
    return {"rejected": sum(job.value * (1 - rm.present[job.id]) for job in rm.data.tails if job.optional)}


def add_waiting(rm: RoundModel) -> Terms:
    """A best-effort lease's completion is the end of its run; one left queued completes as if started after the
    look-ahead. Each second counts its aging weight."""
    m, data, terms = rm.model, rm.data, []
    late = data.horizon + 1
    for job in data.tails:
        if not job.best_effort:
            continue
        present, rem = rm.present[job.id], rm.run_left[job.id]
        done = m.new_int_var(data.now, late + job.resume + job.remaining + job.migrate, f"completion[lease={job.id}]")
        if job.role is Role.SUSPENDABLE:
            susp = rm.suspended[job.id]
            waiting = m.new_bool_var(f"stays_suspended[lease={job.id}]")
            m.add(waiting == susp - present)
            rm.derive(waiting, lambda v, susp=susp, present=present: v(susp - present))
            m.add(done == data.now + job.remaining).only_enforce_if(~susp)
            m.add(done == late + job.resume + rem).only_enforce_if(waiting)
        elif not always(present):
            m.add(done == late + job.resume + rem).only_enforce_if(~present)
        if always(present):
            m.add(done == rm.tail_end(job))
        else:
            m.add(done == rm.tail_end(job)).only_enforce_if(present)
        rm.derive(done, lambda v, job=job, present=present, rem=rem: _completion(rm, job, v, present, rem, late))
        terms.append(job.weight * (done - data.now))
    return {"wait": sum(terms)}


def _completion(rm: RoundModel, job, v, present, rem, late: int) -> int:
    """A hinted plan's completion of a best-effort lease (as add_waiting states it)."""
    if job.role is Role.SUSPENDABLE and not v(rm.suspended[job.id]):
        return rm.data.now + job.remaining
    if v(present):
        return v(rm.tail_end(job))
    return late + job.resume + v(rem)


def add_stability(rm: RoundModel) -> Terms:
    """What an earlier round announced moves as little as possible: its start (seconds) and its VMs' nodes."""
    m, data = rm.model, rm.data
    late = data.horizon + 1
    moved_time, moved_nodes = [], []
    for job in data.tails:
        present = rm.present[job.id]
        if job.planned_start is not None and job.fixed_start is None:
            dev = m.new_int_var(0, max(late, abs(late - job.planned_start)) + data.horizon,
                                f"start_shift[lease={job.id}]")
            m.add(dev >= rm.start[job.id] - job.planned_start).only_enforce_if(present)
            m.add(dev >= job.planned_start - rm.start[job.id]).only_enforce_if(present)
            if not always(present):
                m.add(dev >= abs(late - job.planned_start)).only_enforce_if(~present)
            rm.derive(dev, lambda v, job=job, present=present: abs(v(rm.start[job.id]) - job.planned_start)
                      if v(present) else abs(late - job.planned_start))
            moved_time.append(dev)
        if job.pooled and job.planned_nodes:   # VMs are interchangeable: count those left on a planned node
            kept = []
            for node, planned in Counter(job.planned_nodes[:job.numvms]).items():
                if (job.id, node) not in rm.vms_on_node:
                    continue
                count, used = rm.vms_on_node[job.id, node]
                if planned == 1:
                    kept.append(used)
                else:
                    stay = m.new_int_var(0, planned, f"vms_kept[lease={job.id},node={node}]")
                    m.add(stay <= count)
                    rm.derive(stay, lambda v, count=count, planned=planned: min(v(count), planned))
                    kept.append(stay)
            moved_nodes.append(len(job.planned_nodes[:job.numvms]) - sum(kept))
            continue
        for vm, node in enumerate(job.planned_nodes[:job.numvms]):
            x = rm.vm_to_node.get((job.id, vm, node))
            moved_nodes.append(1 - x if x is not None else 1)
    return {"stability_time": sum(moved_time), "stability_nodes": sum(moved_nodes)}


def combine(terms: Terms, weights: Weights) -> "cp_model.LinearExprT":
    return sum(getattr(weights, name) * terms.get(name, 0) for name in TERM_NAMES)


def plan_terms(data: RoundData, plan: Plan) -> dict[str, int]:
    """The objective's terms for any plan of this round (the solver's, the MIP's, the greedy hint)."""
    out = _tail_terms(data, data.tails, plan)
    out["transfer"] = plan_seconds(data, plan)
    return out


def _tail_terms(data: RoundData, tails, plan: Plan) -> dict[str, int]:
    """The terms of these tails' plans, without the link's (each tail's terms are its own)."""
    got = plan.by_id
    out = dict.fromkeys(TERM_NAMES, 0)
    late = data.horizon + 1
    for job in tails:
        p = got.get(job.id) or LeasePlan(job.id, Outcome.REJECTED if job.optional else Outcome.DEFERRED)
        placed = p.outcome is Outcome.ACCEPTED and p.start is not None
        suspended = job.role is Role.SUSPENDABLE and p.suspend_at is not None
        if job.optional and p.outcome is Outcome.REJECTED:
            out["rejected"] += job.value
        rem = job.remaining - (p.suspend_at - data.now) if suspended else job.remaining
        if job.best_effort:
            if job.role is Role.SUSPENDABLE and not suspended:
                out["wait"] += job.weight * job.remaining
            elif placed:
                out["wait"] += job.weight * (p.start + job.resume + rem - data.now)
            else:
                out["wait"] += job.weight * (late + job.resume + rem - data.now)
        if suspended:
            out["preemptions"] += 1
            out["overhead"] += job.suspend
        if placed:
            moved = [vm for vm, node in enumerate(p.nodes) if job.origin and node != job.origin[vm]]
            out["migrations"] += len(moved)
            out["overhead"] += job.migrate * len(moved) + job.resume
        if job.planned_start is not None and job.fixed_start is None:
            out["stability_time"] += abs((p.start if placed else late) - job.planned_start)
        planned = job.planned_nodes[:job.numvms]
        if job.pooled:
            kept = sum((Counter(p.nodes) & Counter(planned)).values()) if placed else 0
            out["stability_nodes"] += len(planned) - kept
            continue
        for vm, node in enumerate(planned):
            out["stability_nodes"] += 0 if placed and p.nodes[vm] == node else 1
    return out


def cost_difference(data: RoundData, other: RoundData, plan: Plan) -> int:
    """`plan_cost(data, plan) - plan_cost(other, plan)`, where `other` is `data` with some jobs replaced in place
    (cpsat.window: held and idle leases): only the jobs that differ are costed, as every other tail's terms are the
    same in both (the link's are costed whole). A round's neighbourhood differs in a few hundred of its thousands."""
    if (data.now, data.horizon, data.weights) != (other.now, other.horizon, other.weights) \
            or len(data.jobs) != len(other.jobs) or any(a.id != b.id for a, b in zip(data.jobs, other.jobs)):
        return plan_cost(data, plan) - plan_cost(other, plan)
    pairs = [(a, b) for a, b in zip(data.jobs, other.jobs) if a is not b]
    mine = _tail_terms(data, [a for a, _ in pairs if a.has_tail], plan)
    theirs = _tail_terms(other, [b for _, b in pairs if b.has_tail], plan)
    if data.link is not None:
        mine["transfer"], theirs["transfer"] = plan_seconds(data, plan), plan_seconds(other, plan)
    return sum(getattr(data.weights, name) * (mine[name] - theirs[name]) for name in TERM_NAMES)


def plan_cost(data: RoundData, plan: Plan) -> int:
    """The weighted objective of a plan: the value the CP-SAT and MIP models report for it."""
    terms = plan_terms(data, plan)
    return sum(getattr(data.weights, name) * terms[name] for name in TERM_NAMES)
