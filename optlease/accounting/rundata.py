"""A finished run's data file contents: optlease's own per-run and per-lease figures (always there, the names
docs/accounting.md lists), then what the configured probes collected. Pure: it reads the run's result and the
stopped data collection."""
from __future__ import annotations

from typing import Any

from optlease.accounting.collection import AccountingDataCollection, with_averages
from optlease.accounting.datafile import RunData
from optlease.accounting.metrics import lease_records, run_summary
from optlease.accounting.rounds import round_summary

# optlease's own per-run figures that `optlease simulate` prints at its end: name, label, unit
HEADLINE = (
    ("accepted_ar", "ARs accepted", ""), ("rejected_ar", "ARs rejected", ""),
    ("accepted_immediate", "immediate leases accepted", ""),
    ("rejected_immediate", "immediate leases rejected", ""),
    ("best_effort_completed", "best-effort leases completed", ""),
    ("best_effort_all_completed_at", "all best-effort leases completed at", "s"),
    ("best_effort_wait_avg", "best-effort wait, average", "s"),
    ("best_effort_wait_max", "best-effort wait, max", "s"),
    ("bounded_slowdown_avg", "bounded slowdown, average", ""),
    ("cpu_utilization", "CPU utilization", "%"),
    ("preemptions", "preemptions", ""), ("suspensions", "suspensions", ""), ("migrations", "migrations", ""),
    ("image_transfers", "image transfers", ""), ("transfer_volume_mb", "image transfer volume", "MB"),
    ("cache_hit_rate", "image cache hit rate", "%"),
    ("round_wall_time_p50", "round wall time, p50", "s"), ("round_wall_time_p95", "round wall time, p95", "s"),
    ("round_gap_mean", "round gap, mean", ""),
    ("wall_time", "wall time", "s"),
)


def run_stats(result: Any) -> dict[str, Any]:
    """optlease's own per-run figures (seconds, shares 0-1) from a SimulationResult."""
    summary = run_summary(result.site, result.leases, result.end_time)
    be = summary["best_effort"]
    stats: dict[str, Any] = {
        "leases": summary["leases"],
        "accepted_ar": summary["ar"]["accepted"], "rejected_ar": summary["ar"]["rejected"],
        "accepted_immediate": summary["immediate"]["accepted"],
        "rejected_immediate": summary["immediate"]["rejected"],
        "best_effort_total": be["total"], "best_effort_completed": be["completed"],
        "best_effort_rejected": be["rejected"], "best_effort_all_completed_at": be["all_completed_at"],
        "best_effort_wait_avg": be["wait_avg"], "best_effort_wait_max": be["wait_max"],
        "bounded_slowdown_avg": be["bounded_slowdown_avg"], "cpu_utilization": summary["cpu_utilization"],
        "preemptions": summary["preemptions"], "suspensions": summary["suspensions"],
        "migrations": summary["migrations"], "requeues": summary["requeues"], "end_time": summary["end_time"],
        "mapper": result.options.mapper, "rounds": result.rounds, "wall_time": round(result.wall_time, 3),
    }
    images = getattr(result, "images", None)
    if images is not None:
        # `lease-preparation: imagetransfer`: transfers, their volume and link time, and the caches' hits
        stats.update({k: v for k, v in images.figures().items() if v is not None})
    if result.round_records is not None:
        rounds = round_summary(result.round_records)
        stats.update({
            "rounds_solved": rounds["solved"], "rounds_changed": rounds["changed"],
            "round_wall_time_p50": rounds["wall_time_s"]["p50"], "round_wall_time_p95": rounds["wall_time_s"]["p95"],
            "round_wall_time_max": rounds["wall_time_s"]["max"], "round_gap_mean": rounds["gap"]["mean"],
            "round_gap_max": rounds["gap"]["max"],
        })
        stats.update({f"round_status_{status}": n for status, n in rounds["status"].items()})
    return stats


def record_rounds(accounting: AccountingDataCollection, records: list | None) -> None:
    """Counters "Round wall time" (s) and "Round gap" of each solved CP-SAT round, with their running averages
    (AVERAGE_NORMAL: per round, not per second). Added to the stopped collection, so that no closing row at the
    run's end counts the last round twice."""
    if records is None:
        return
    solved = [r for r in records if r.stats.num_variables > 0]
    for name, value_of in (("Round wall time", lambda r: r.stats.wall_time), ("Round gap", lambda r: r.stats.gap)):
        rows = [(r.now, float(value_of(r))) for r in solved if value_of(r) is not None]
        accounting.counters[name] = with_averages(rows, accounting.AVERAGE_NORMAL)
        accounting.counter_kinds[name] = accounting.AVERAGE_NORMAL


def run_data(result: Any, accounting: AccountingDataCollection, attrs: dict[str, str]) -> RunData:
    """The data file of a run: optlease's own figures first, the probes' after (a probe's stat of the same name
    wins)."""
    per_run = run_stats(result)
    per_run.update({name: accounting.stats.get(name) for name in accounting.stats_names})
    per_lease = lease_records(result.leases)
    for row in per_lease:
        stats = accounting.lease_stats.get(row["id"], {})
        row.update({name: stats[name] for name in accounting.lease_stats_names if name in stats})
    return RunData(attrs=dict(attrs), per_run=per_run, per_lease=per_lease,
                   counters={name: list(rows) for name, rows in accounting.counters.items()},
                   counter_kinds=dict(accounting.counter_kinds))
