"""Build the CP-SAT round model, solve it with a fixed seed, and return the better of its plan and the hint."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from optlease.scheduling.cpsat.constraints import add_capacity, add_exclusion, add_placement, add_suspensions, \
    add_symmetry
from optlease.scheduling.cpsat.decode import add_hint, decode, holding_plan
from optlease.scheduling.cpsat.model import RoundModel, build_variables
from optlease.scheduling.cpsat.objective import add_acceptance, add_stability, add_waiting, combine, \
    cost_difference, plan_cost
from optlease.scheduling.cpsat.prepare import RoundData, prepare
from optlease.scheduling.cpsat.transfers import add_transfers
from optlease.scheduling.cpsat.window import hold_outside
from optlease.scheduling.snapshot import Plan, RoundSnapshot, RoundStats, Weights

log = logging.getLogger(__name__)

GROUPS = (add_placement, add_suspensions, add_capacity, add_exclusion, add_symmetry,
          add_acceptance, add_waiting, add_stability, add_transfers)


@dataclass(frozen=True)
class SolveOptions:
    time_limit: float = 10.0        # wall-clock seconds: with work_limit, only a safety net (logged when it fires)
    workers: int = 4
    seed: int = 0
    lookahead: int | None = None    # seconds after `now` a start may still be planned; None: enough for everything
    weights: Weights = Weights()
    log_search: bool = False
    probing_level: int = 0          # CP-SAT presolve probing (2 is its default)
    # CP-SAT's LP relaxation and its disjunctive reasoning over pairs in each cumulative, as CP-SAT has them: both
    # prove bounds (`optimize`); the rounds (simulator and daemon) turn both off, as there they cost more time per
    # unit of work than they pay for (models/cpsat-round.md)
    linearization_level: int = 1
    disjunctive_in_cumulative: bool = True
    presolve: bool = True           # CP-SAT presolve: it took most of a short round's time on the simulator's rounds
    work_limit: float = 0.0         # > 0: CP-SAT deterministic seconds per search with one worker, so that the same
                                    # round always gets the same plan, on any machine and under any load
    window: int | None = None       # seconds: tails the hint starts later are held there (cpsat.window); None: all free


# the share of its wall-clock cap a search must have used, without reaching its work limit, for the cap to have
# stopped it (CP-SAT stops a little after either limit)
CAP_SHARE = 0.98


def build_round(data: RoundData) -> tuple[RoundModel, cp_model.LinearExprT]:
    """The whole model: variables, every constraint group, and the weighted objective (not yet set)."""
    rm = build_variables(data)
    terms: dict[str, list] = {}
    for group in GROUPS:
        for name, expr in group(rm).items():
            terms.setdefault(name, []).append(expr)
    objective = combine({name: sum(parts) for name, parts in terms.items()}, data.weights)
    return rm, objective


def solve_round(snap: RoundSnapshot, options: SolveOptions = SolveOptions(), hint: Plan | None = None,
                data: RoundData | None = None) -> Plan:
    """Plan one round. The hint (the greedy plan of the same snapshot; without one, the plan that changes nothing) is
    kept whenever the solver finds nothing better in time; the plan's stats say which was kept and its gap.
    `data`: the snapshot already prepared with the options' weights and look-ahead."""
    if data is None:
        data = prepare(snap, options.weights, options.lookahead)
    if hint is None:   # a round never fails to produce a plan: without a greedy plan, change nothing
        hint = holding_plan(data)
    search, held = (data, 0) if options.window is None else hold_outside(data, hint, options.window)
    rm, objective = build_round(search)
    rm.model.minimize(objective)
    add_hint(rm, hint)
    proto = rm.model.proto
    size = dict(num_variables=len(proto.variables), num_constraints=len(proto.constraints), held=held)
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = options.time_limit
    params.num_workers = max(1, options.workers)
    if options.work_limit > 0:   # reproducible: one worker, stopped by the work it did, not by the clock
        params.max_deterministic_time = options.work_limit
        params.num_workers = 1
    params.random_seed = options.seed
    params.log_search_progress = options.log_search
    # presolve probing costs seconds on many optional intervals and gains little on these models
    params.cp_model_probing_level = options.probing_level
    params.cp_model_presolve = options.presolve
    params.linearization_level = options.linearization_level
    params.use_disjunctive_constraint_in_cumulative = options.disjunctive_in_cumulative
    status = solver.solve(rm.model)
    name = solver.status_name(status)
    capped = options.work_limit > 0 and status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE) \
        and solver.wall_time >= CAP_SHARE * options.time_limit \
        and solver.response_proto.deterministic_time < options.work_limit
    if capped:   # the safety net fired: this round's plan depends on the machine's speed and load
        log.warning("round at %s: the wall-clock cap of %.3g s stopped the search before its work limit (%.3g "
                    "deterministic s): this plan may differ from run to run", snap.now, options.time_limit,
                    options.work_limit)
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    hint_cost = plan_cost(data, hint)
    # the whole round's cost of the neighbourhood's plans: a lease the window lets run on (cpsat.window) is a fixed
    # occupancy there, its waiting a constant the search leaves out
    offset = cost_difference(data, search, hint) if search is not data else 0
    if not found or hint_cost < round(solver.objective_value) + offset:
        log.info("round at %s: solver %s, keeping the hint", snap.now, name)
        bound = solver.best_objective_bound + offset if found else None
        stats = RoundStats(f"HINT ({name})", hint_cost, bound, _gap(hint_cost, bound), solver.wall_time,
                           source="hint", hint_objective=hint_cost, capped=capped, **size)
        return replace(hint, stats=stats)
    objective_value = round(solver.objective_value) + offset
    bound = solver.best_objective_bound + offset
    plan = decode(rm, lambda e: e if isinstance(e, int) else solver.value(e))
    stats = RoundStats(name, objective_value, bound, _gap(objective_value, bound), solver.wall_time,
                       hint_objective=hint_cost, capped=capped, **size)
    return replace(plan, stats=stats)


def _gap(objective: int | None, bound: float | None) -> float | None:
    if objective is None or bound is None or math.isinf(bound):
        return None
    return 0.0 if objective == 0 else max(0.0, (objective - bound) / abs(objective))
