#!/usr/bin/env python3
"""The quality suite's verdict (docs/quality-suite.md): cpsat against the best greedy mode of each workload, with the
clairvoyant offline schedule as the headroom, read from the data files `optlease run-experiments` (and `optlease
compare --schedulers offline`) wrote. JSON on stdout (or --json FILE), a Markdown table in --markdown FILE.

    scripts/quality_suite.py --family synthetic=DATA/synthetic --family blue=DATA/blue15 --family blue=DATA/blue30 \
        --markdown suite.md

Every `*.parquet` under a family's folders is one run. A run is told apart by what its data file says: the workload
is its trace and injection (`TRACE` or `TRACE+INJECTION`, the files' names up to their first dot); the scheduler is
`cpsat` when its configuration has `[scheduling] mapper: cpsat`, `offline` for `optlease compare`'s offline optimum,
else the greedy mode `greedy-off`, `-aggressive`, `-conservative` or `-intermediate-N` from its backfilling options,
with the run-time estimate it booked. For each workload:

- each greedy mode with the estimate that suits it there (the lower mean bounded slowdown; `requested` on a tie),
  and the best greedy mode: the lowest mean bounded slowdown of them;
- ratio: cpsat's mean bounded slowdown over the best greedy mode's (bar: mean <= 0.80 over the suite, <= 0.85
  within each family, no workload above 1.02);
- AR and immediate acceptance (accepted / requested) of cpsat and of the best greedy mode (bar: never lower);
- max best-effort wait, cpsat's over the best greedy mode's (bar: at most 1.10);
- preemptions of both; the offline schedule's mean bounded slowdown where its run finished.

A workload is listed but not counted in the means when the best greedy mode's bounded slowdown is under 1.2, or the
offline schedule's is within 10 % of it either way (no room to gain; an offline schedule above it is no bound: its
solve stopped at its time limit, or it weighs rejected requests against waiting differently), or its cpsat run or
every greedy run is missing. A greedy mode that the family ran but that has no run of a workload (it failed there,
or has not run yet) is named in its row: the best greedy mode there is the best of those that finished.
"""
from __future__ import annotations

import argparse
import configparser
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from optlease.accounting.datafile import read_run  # noqa: E402
from optlease.errors import InputError  # noqa: E402

GREEDY_MODES = ("greedy-off", "greedy-aggressive", "greedy-conservative")   # and greedy-intermediate-N
ESTIMATES = ("requested", "user-history")   # the order breaks ties: Haizea's way first
NO_ROOM_SLOWDOWN = 1.2    # best greedy mean bounded slowdown under this: nothing to gain
NO_ROOM_OFFLINE = 0.10    # offline within this share of the best greedy mode: nothing to gain
BARS = {"suite_mean_ratio": 0.80, "family_mean_ratio": 0.85, "workload_ratio": 1.02, "max_wait_ratio": 1.10}
DEFAULT_TUNING = ("30days+work_10-dur_2h-size_1small",)   # the month cpsat's defaults were chosen on


def stem(path: str) -> str:
    return Path(path).name.split(".")[0]


def workload_of(attrs: dict[str, str]) -> str:
    trace, injection = attrs.get("tracefile", ""), attrs.get("injectionfile", "")
    return stem(trace) + (f"+{stem(injection)}" if injection else "")


def scheduler_of(per_run: dict, attrs: dict[str, str]) -> tuple[str, str]:
    """(scheduler, run-time estimate) of a run, from its figures and its configuration's text."""
    conf = configparser.ConfigParser(interpolation=None)
    conf.read_string(attrs.get("configuration", ""))
    sched = conf["scheduling"] if conf.has_section("scheduling") else {}
    estimate = attrs.get("runtime_estimate") or sched.get("runtime-estimate", "requested")
    mapper = per_run.get("mapper")
    if mapper == "offline":
        return "offline", estimate
    if mapper == "cpsat":
        return "cpsat", estimate
    backfilling = sched.get("backfilling", "aggressive")   # Haizea's default
    if backfilling == "intermediate":
        return f"greedy-intermediate-{sched.get('backfilling-reservations', '1')}", estimate
    return f"greedy-{backfilling}", estimate


def share(accepted, rejected) -> float | None:
    total = (accepted or 0) + (rejected or 0)
    return None if total == 0 else (accepted or 0) / total


def figures(run) -> dict:
    p = run.per_run
    return {"bounded_slowdown": p.get("bounded_slowdown_avg"),
            "ar_acceptance": share(p.get("accepted_ar"), p.get("rejected_ar")),
            "immediate_acceptance": share(p.get("accepted_immediate"), p.get("rejected_immediate")),
            "max_wait": p.get("best_effort_wait_max"), "preemptions": p.get("preemptions"),
            "datafile": str(run.path)}


class Run:   # a data file read, with where it came from
    def __init__(self, path: Path):
        data = read_run(path)
        self.path, self.attrs, self.per_run = path, data.attrs, data.per_run


def collect(families: list[tuple[str, Path]]) -> dict[tuple[str, str], dict[str, dict[str, dict]]]:
    """(family, workload) -> scheduler -> estimate -> figures."""
    out: dict[tuple[str, str], dict[str, dict[str, dict]]] = {}
    for family, folder in families:
        if not folder.is_dir():
            raise InputError("not a folder of data files", str(folder))
        paths = sorted(folder.rglob("*.parquet"))
        if not paths:
            raise InputError("no data file (*.parquet) in it", str(folder))
        for path in paths:
            run = Run(path)
            name, estimate = scheduler_of(run.per_run, run.attrs)
            slot = out.setdefault((family, workload_of(run.attrs)), {}).setdefault(name, {})
            if estimate in slot:
                raise InputError(f"a second {name} run of {workload_of(run.attrs)} with estimate {estimate} "
                                 f"(the other: {slot[estimate]['datafile']})", str(path))
            slot[estimate] = figures(run)
    return out


def ratio(a, b) -> float | None:
    if a is None or b is None:
        return None
    return a / b if b else (1.0 if a == 0 else None)


def judge(family: str, workload: str, runs: dict[str, dict[str, dict]], tuning: set[str],
          expected: set[str]) -> dict:
    """One workload's row: the best estimate of each greedy mode, the best greedy mode, cpsat against it;
    `expected`: the greedy modes its family ran (one missing here failed or has not run: the best may be better)."""
    modes = {}
    for name in sorted(runs):
        if not name.startswith("greedy-"):
            continue
        done = [(e, runs[name][e]) for e in ESTIMATES if runs[name].get(e, {}).get("bounded_slowdown") is not None]
        if done:
            estimate, best = min(done, key=lambda item: item[1]["bounded_slowdown"])
            modes[name] = {"estimate": estimate, **best}
    cpsat = next(iter(runs.get("cpsat", {}).values()), None)
    offline = next(iter(runs.get("offline", {}).values()), None)
    row: dict = {"family": family, "workload": workload, "tuning": workload in tuning,
                 "greedy_missing": sorted(expected - set(modes)),
                 "greedy": {m: {"estimate": f["estimate"], "bounded_slowdown": f["bounded_slowdown"]}
                            for m, f in modes.items()}}
    best_name = min(modes, key=lambda m: modes[m]["bounded_slowdown"]) if modes else None
    best = modes.get(best_name) if best_name else None
    row["best_greedy"] = None if best is None else {"mode": best_name, **{k: v for k, v in best.items()}}
    row["cpsat"] = cpsat
    row["offline_bounded_slowdown"] = offline["bounded_slowdown"] if offline else None
    reasons = []
    if best is None or cpsat is None or cpsat.get("bounded_slowdown") is None:
        reasons.append("runs missing: " + ", ".join(
            what for what, missing in (("greedy", best is None), ("cpsat", cpsat is None)) if missing))
    else:
        row.update({
            "ratio": ratio(cpsat["bounded_slowdown"], best["bounded_slowdown"]),
            "max_wait_ratio": ratio(cpsat["max_wait"], best["max_wait"]),
            "ar_acceptance_delta": _delta(cpsat["ar_acceptance"], best["ar_acceptance"]),
            "immediate_acceptance_delta": _delta(cpsat["immediate_acceptance"], best["immediate_acceptance"]),
        })
        if best["bounded_slowdown"] < NO_ROOM_SLOWDOWN:
            reasons.append(f"best greedy bounded slowdown {best['bounded_slowdown']:.3g} < {NO_ROOM_SLOWDOWN}")
        bsd = best["bounded_slowdown"]
        if offline and offline["bounded_slowdown"] is not None and \
                abs(offline["bounded_slowdown"] - bsd) <= NO_ROOM_OFFLINE * bsd:
            reasons.append(f"offline {offline['bounded_slowdown']:.3g} within {NO_ROOM_OFFLINE:.0%} of best greedy")
    row["counted"] = not reasons
    row["not_counted_because"] = "; ".join(reasons)
    return row


def _delta(a, b) -> float | None:
    return None if a is None or b is None else a - b


def mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarize(rows: list[dict]) -> dict:
    counted = [r for r in rows if r["counted"]]
    families = sorted({r["family"] for r in rows})
    by_family = {f: mean([r["ratio"] for r in counted if r["family"] == f]) for f in families}
    unseen = [r["ratio"] for r in counted if not r["tuning"]]
    checks = {
        "suite_mean_ratio": _bar(mean([r["ratio"] for r in counted]), BARS["suite_mean_ratio"]),
        "family_mean_ratio": {f: _bar(v, BARS["family_mean_ratio"]) for f, v in by_family.items()},
        "no_workload_above": {"bar": BARS["workload_ratio"],
                              "above": [r["workload"] for r in counted if r["ratio"] > BARS["workload_ratio"]]},
        "acceptance_never_lower": [r["workload"] for r in counted if (r["ar_acceptance_delta"] or 0) < 0
                                   or (r["immediate_acceptance_delta"] or 0) < 0],
        "max_wait_at_most": {"bar": BARS["max_wait_ratio"],
                             "above": [r["workload"] for r in counted if r["max_wait_ratio"] is not None
                                       and r["max_wait_ratio"] > BARS["max_wait_ratio"]]},
    }
    return {"workloads": len(rows), "counted": len(counted),
            "suite_mean_ratio": checks["suite_mean_ratio"]["value"],
            "suite_mean_ratio_without_tuning": mean(unseen), "family_mean_ratio": by_family, "checks": checks}


def _bar(value, bar) -> dict:
    return {"value": value, "bar": bar, "met": None if value is None else value <= bar}


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def markdown(rows: list[dict], summary: dict) -> str:
    out = ["| family | workload | best greedy (estimate) | greedy BSD | cpsat BSD | ratio | offline BSD | "
           "AR acc. cpsat / greedy (%) | imm. acc. cpsat / greedy (%) | max wait ratio | preemptions cpsat / greedy "
           "| counted |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        best, cp = r["best_greedy"] or {}, r["cpsat"] or {}
        name = r["workload"] + (" (tuning)" if r["tuning"] else "") + \
            (f" (no run of {', '.join(r['greedy_missing'])})" if r["greedy_missing"] else "")
        out.append(" | ".join([
            f"| {r['family']}", name, f"{best.get('mode', '-')} ({best.get('estimate', '-')})",
            fmt(best.get("bounded_slowdown")), fmt(cp.get("bounded_slowdown")), fmt(r.get("ratio")),
            fmt(r["offline_bounded_slowdown"]),
            f"{pct(cp.get('ar_acceptance'))} / {pct(best.get('ar_acceptance'))}",
            f"{pct(cp.get('immediate_acceptance'))} / {pct(best.get('immediate_acceptance'))}",
            fmt(r.get("max_wait_ratio")), f"{fmt(cp.get('preemptions'))} / {fmt(best.get('preemptions'))}",
            "yes" if r["counted"] else f"no: {r['not_counted_because']}"]) + " |")
    c = summary["checks"]
    out += ["", f"Counted workloads: {summary['counted']} of {summary['workloads']}.", "",
            f"- suite mean ratio: {fmt(summary['suite_mean_ratio'])} (bar <= {BARS['suite_mean_ratio']}; "
            f"without the tuning workloads: {fmt(summary['suite_mean_ratio_without_tuning'])})"]
    out += [f"- {f} mean ratio: {fmt(v)} (bar <= {BARS['family_mean_ratio']})"
            for f, v in summary["family_mean_ratio"].items()]
    out += [f"- workloads above {BARS['workload_ratio']}: {', '.join(c['no_workload_above']['above']) or 'none'}",
            f"- workloads where cpsat accepts a smaller share of ARs or immediate leases: "
            f"{', '.join(c['acceptance_never_lower']) or 'none'}",
            f"- workloads where cpsat's max best-effort wait is more than {BARS['max_wait_ratio']:.2f}x: "
            f"{', '.join(c['max_wait_at_most']['above']) or 'none'}"]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", action="append", required=True, metavar="NAME=DIR",
                        help="a family's data files (every *.parquet under DIR); repeat for more folders or families")
    parser.add_argument("--tuning", action="append", metavar="WORKLOAD",
                        help=f"a workload cpsat was tuned on (default: {', '.join(DEFAULT_TUNING)})")
    parser.add_argument("--json", type=Path, help="write the JSON here instead of standard output")
    parser.add_argument("--markdown", type=Path, help="also write the Markdown table here")
    args = parser.parse_args(argv)
    try:
        families = []
        for item in args.family:
            name, sep, folder = item.partition("=")
            if not sep or not name or not folder:
                raise InputError("expected NAME=DIR", f"--family {item}")
            families.append((name, Path(folder)))
        runs = collect(families)
    except InputError as exc:
        print(f"quality_suite: {exc}", file=sys.stderr)
        return 2
    tuning = set(args.tuning or DEFAULT_TUNING)
    modes = {f: {m for (g, _), r in runs.items() if g == f for m in r if m.startswith("greedy-")}
             for f, _ in families}
    rows = [judge(f, w, runs[(f, w)], tuning, modes[f]) for f, w in sorted(runs)]
    summary = summarize(rows)
    text = json.dumps({"summary": summary, "workloads": rows}, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    else:
        print(text)
    if args.markdown:
        args.markdown.write_text(markdown(rows, summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
