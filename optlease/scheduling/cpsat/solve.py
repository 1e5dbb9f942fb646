"""Build the CP-SAT round model, solve it with a fixed seed, and return the better of its plan and the hint."""
from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from optlease.scheduling.cpsat.constraints import add_capacity, add_exclusion, add_placement, add_suspensions, \
    add_symmetry
from optlease.scheduling.cpsat.decode import add_hint, decode, holding_plan
from optlease.scheduling.cpsat.model import RoundModel, build_variables
from optlease.scheduling.cpsat.objective import add_acceptance, add_stability, add_waiting, combine, plan_cost
from optlease.scheduling.cpsat.prepare import RoundData, prepare
from optlease.scheduling.snapshot import Plan, RoundSnapshot, RoundStats, Weights

log = logging.getLogger(__name__)

GROUPS = (add_placement, add_suspensions, add_capacity, add_exclusion, add_symmetry,
          add_acceptance, add_waiting, add_stability)


@dataclass(frozen=True)
class SolveOptions:
    time_limit: float = 10.0        # seconds
    workers: int = 4
    seed: int = 0
    lookahead: int | None = None    # seconds after `now` a start may still be planned; None: enough for everything
    weights: Weights = Weights()
    log_search: bool = False
    probing_level: int = 0          # CP-SAT presolve probing (2 is its default)
    # CP-SAT's LP relaxation and its disjunctive reasoning over pairs in each cumulative, as CP-SAT has them: both
    # prove bounds (`optimize`); the rounds (CpsatRound: simulator and daemon) turn both off, as there they cost more
    # time per unit of work than they pay for (models/cpsat-round.md)
    linearization_level: int = 1
    disjunctive_in_cumulative: bool = True
    stall: float | None = None      # stop when this many seconds pass without a better solution (None: never)
    presolve: bool = True           # CP-SAT presolve: it took most of a short round's time on the simulator's rounds
    deadline: float | None = None   # time.perf_counter() by which the search must have stopped (a round's budget)
    work_limit: float = 0.0         # > 0: CP-SAT deterministic seconds per search, one worker and no stall, so that
                                    # the same round always gets the same plan (time_limit and deadline still cap it)

# less than this left before the deadline: no model is built (loading one alone takes longer)
MIN_SEARCH = 0.02


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
    if options.deadline is not None and options.deadline - time.perf_counter() < MIN_SEARCH:
        # the round's budget went on the greedy pass and the snapshot: no model is built, the hint stands
        hint_cost = plan_cost(data, hint)
        return replace(hint, stats=RoundStats("HINT (NO TIME)", hint_cost, None, None, 0.0, 0, 0, source="hint",
                                              hint_objective=hint_cost))
    rm, objective = build_round(data)
    rm.model.minimize(objective)
    add_hint(rm, hint)
    proto = rm.model.proto
    size = dict(num_variables=len(proto.variables), num_constraints=len(proto.constraints))
    limit = options.time_limit
    if options.deadline is not None:
        limit = max(MIN_SEARCH, min(limit, options.deadline - time.perf_counter()))
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = limit
    params.num_workers = max(1, options.workers)
    stall = options.stall
    if options.work_limit > 0:   # reproducible: one worker, stopped by the work it did, not by the clock
        params.max_deterministic_time = options.work_limit
        params.num_workers = 1
        stall = None
    params.random_seed = options.seed
    params.log_search_progress = options.log_search
    # presolve probing costs seconds on many optional intervals and gains little on these models
    params.cp_model_probing_level = options.probing_level
    params.cp_model_presolve = options.presolve
    params.linearization_level = options.linearization_level
    params.use_disjunctive_constraint_in_cumulative = options.disjunctive_in_cumulative
    status = _solve(solver, rm.model, stall)
    name = solver.status_name(status)
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    hint_cost = plan_cost(data, hint)
    if not found or hint_cost < round(solver.objective_value):
        log.info("round at %s: solver %s, keeping the hint", snap.now, name)
        bound = solver.best_objective_bound if found else None
        stats = RoundStats(f"HINT ({name})", hint_cost, bound, _gap(hint_cost, bound), solver.wall_time,
                           source="hint", hint_objective=hint_cost, **size)
        return replace(hint, stats=stats)
    objective_value = round(solver.objective_value)
    bound = solver.best_objective_bound
    plan = decode(rm, lambda e: e if isinstance(e, int) else solver.value(e))
    stats = RoundStats(name, objective_value, bound, _gap(objective_value, bound), solver.wall_time,
                       hint_objective=hint_cost, **size)
    return replace(plan, stats=stats)


class _Progress(cp_model.CpSolverSolutionCallback):
    """Remembers when the search last found a better solution (None before the first one)."""

    def __init__(self) -> None:
        super().__init__()
        self.last: float | None = None

    def on_solution_callback(self) -> None:
        self.last = time.monotonic()


def _solve(solver: cp_model.CpSolver, model: cp_model.CpModel, stall: float | None) -> int:
    """Solve; with `stall`, a watcher stops the search once that long has passed since its last better solution
    (the time limit alone applies until a first solution is found)."""
    if stall is None or stall >= solver.parameters.max_time_in_seconds:
        return solver.solve(model)
    progress, done = _Progress(), threading.Event()

    def watch() -> None:
        while not done.wait(min(0.02, stall / 4)):
            if progress.last is not None and time.monotonic() - progress.last > stall:
                solver.stop_search()
                return

    watcher = threading.Thread(target=watch, name="cpsat-stall", daemon=True)
    watcher.start()
    try:
        return solver.solve(model, progress)
    finally:
        done.set()
        watcher.join()


def _gap(objective: int | None, bound: float | None) -> float | None:
    if objective is None or bound is None or math.isinf(bound):
        return None
    return 0.0 if objective == 0 else max(0.0, (objective - bound) / abs(objective))
