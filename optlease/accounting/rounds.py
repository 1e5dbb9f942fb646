"""The distribution of a run's CP-SAT rounds (`mapper: cpsat`): what `optlease simulate --summary-out` reports
under `rounds`. Pure: it reads the round records (`CpsatRound.records`) and nothing else."""
from __future__ import annotations

from statistics import mean
from typing import Any, Iterable


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 1]) of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _spread(values: list[float], digits: int | None = None) -> dict[str, float | None]:
    p50, p95, top = percentile(values, 0.5), percentile(values, 0.95), max(values, default=None)
    if digits is not None:
        p50, p95, top = (None if v is None else round(v, digits) for v in (p50, p95, top))
    return {"p50": p50, "p95": p95, "max": top}


def round_summary(records: Iterable[Any]) -> dict[str, Any]:
    """Counts and distributions over the rounds of a cpsat run.

    `records` are RoundRecord-like (now, movable, changed, stats: RoundStats, greedy_objective). A round is *solved*
    when a model was built (it has variables); skipped rounds (EMPTY, GREEDY-OPTIMAL, UNCHANGED, SPACED) count only in
    `count` and `status`. Wall times, gaps and model sizes are over the solved rounds. `beat_hint`: solved rounds
    whose solver objective is strictly below the hint's (the greedy plan completed); `beat_greedy`: strictly below
    the greedy pass's plan in the same model; `changed`: rounds that re-planned at least one lease (`leases_changed`
    leases in all)."""
    records = list(records)
    solved = [r for r in records if r.stats.num_variables > 0]
    status: dict[str, int] = {}
    source: dict[str, int] = {}
    for r in records:
        key = r.stats.status.split(" ")[0]
        status[key] = status.get(key, 0) + 1
        source[r.stats.source] = source.get(r.stats.source, 0) + 1
    gaps = [r.stats.gap for r in solved if r.stats.gap is not None]
    beat_hint = sum(1 for r in solved if r.stats.objective is not None and r.stats.hint_objective is not None
                    and r.stats.objective < r.stats.hint_objective)
    beat_greedy = sum(1 for r in solved if r.stats.objective is not None and r.greedy_objective is not None
                      and r.stats.objective < r.greedy_objective)
    return {
        "count": len(records),
        "solved": len(solved),
        "changed": sum(1 for r in records if r.changed),
        "leases_changed": sum(r.changed for r in records),
        "status": dict(sorted(status.items())),
        "source": dict(sorted(source.items())),
        "wall_time_s": _spread([r.stats.wall_time for r in solved], 4),
        "gap": {"mean": mean(gaps) if gaps else None, "max": max(gaps, default=None)},
        "variables": {k: v for k, v in _spread([r.stats.num_variables for r in solved]).items() if k != "p95"},
        "constraints": {k: v for k, v in _spread([r.stats.num_constraints for r in solved]).items() if k != "p95"},
        "beat_hint": beat_hint,
        "beat_hint_share": beat_hint / len(solved) if solved else None,
        "beat_greedy": beat_greedy,
    }


def admission_summary(admissions: Iterable[Any]) -> dict[str, Any]:
    """The ARs and immediate leases the greedy pass refused that were offered to the round model
    (`CpsatRound.admissions`): how many, how many it admitted, the bookings it moved and the running leases it
    suspended for them, the leases requeued for immediate leases the model could not admit, and the solve times."""
    admissions = list(admissions)
    return {
        "offered": len(admissions),
        "admitted": sum(1 for a in admissions if a.admitted),
        "bookings_moved": sum(a.moved for a in admissions),
        "leases_suspended": sum(a.suspended for a in admissions),
        "leases_requeued": sum(a.requeued for a in admissions),
        "wall_time_s": _spread([a.stats.wall_time for a in admissions], 4),
    }
