"""`optlease compare`: one configuration's workload under several schedulers (greedy backfilling modes, cpsat
rounds, the offline optimum), each run's data file and schedule written side by side, then the report of them all.
Every scheduler books the same run-time estimate unless the user asks otherwise, and the report says which."""
from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from optlease.errors import InputError

GREEDY = {"greedy-off": "off", "greedy-aggressive": "aggressive", "greedy-conservative": "conservative"}
_INTERMEDIATE = re.compile(r"greedy-intermediate-([1-9][0-9]{0,3})")
KNOWN = "greedy-off, greedy-aggressive, greedy-conservative, greedy-intermediate-N, cpsat, offline"
MAX_SCHEDULERS = 16


@dataclass(frozen=True)
class Scheduler:
    name: str
    overrides: dict[str, str]     # [scheduling] options over the configuration's
    offline: bool = False         # the whole workload as one model (optlease optimize), not a simulation


def scheduler(name: str) -> Scheduler:
    """A scheduler by name; InputError listing the known ones for any other."""
    if name in GREEDY:
        return Scheduler(name, {"mapper": "greedy", "backfilling": GREEDY[name]})
    match = _INTERMEDIATE.fullmatch(name)
    if match:
        return Scheduler(name, {"mapper": "greedy", "backfilling": "intermediate",
                                "backfilling-reservations": match.group(1)})
    if name == "cpsat":
        return Scheduler(name, {"mapper": "cpsat"})
    if name == "offline":
        # the greedy run the solver takes as its hint is the configuration's own backfilling
        return Scheduler(name, {"mapper": "greedy"}, offline=True)
    raise InputError(f"unknown scheduler {name[:40]!r} (known: {KNOWN})", "--schedulers")


def parse_schedulers(text: str) -> list[Scheduler]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise InputError("no scheduler named", "--schedulers")
    if len(names) > MAX_SCHEDULERS:
        raise InputError(f"{len(names)} schedulers; at most {MAX_SCHEDULERS}", "--schedulers")
    if len(set(names)) != len(names):
        raise InputError("a scheduler is named twice", "--schedulers")
    return [scheduler(n) for n in names]


def parse_estimates(text: Optional[str], schedulers: list[Scheduler], default: str,
                    choices: tuple[str, ...]) -> dict[str, str]:
    """Scheduler -> run-time estimate: `default` for all, overridden by `EST` (all) or `SCHEDULER=EST` items."""
    out = {s.name: default for s in schedulers}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, _, est = item.rpartition("=")
        if est not in choices:
            raise InputError(f"{item[:60]!r}: the estimate must be one of {', '.join(choices)}", "--runtime-estimate")
        if name and name not in out:
            raise InputError(f"{item[:60]!r}: {name[:40]!r} is not one of the schedulers compared",
                             "--runtime-estimate")
        for key in ([name] if name else out):
            out[key] = est
    return out


def estimate_note(estimates: dict[str, str]) -> str:
    kinds = set(estimates.values())
    if len(kinds) == 1:
        return f"Run-time estimate booked by every scheduler: {kinds.pop()}."
    return "Run-time estimates differ: " + ", ".join(f"{s}: {e}" for s, e in estimates.items()) + "."


def compare(conf: Path, schedulers: list[Scheduler], out: Path, estimates: dict[str, str],
            offline_time_limit: float, workload: dict[str, str], progress=lambda line: None) -> list[Path]:
    """Runs every scheduler on the configuration's workload (`workload`: [tracefile] options over the
    configuration's); writes `NAME.parquet` and `NAME.schedule.json` per scheduler into `out`; returns the data
    files in the order given."""
    from optlease.formats.config import load_config

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for s in schedulers:
        cfg = load_config(conf, overrides={"scheduling": {**s.overrides, "runtime-estimate": estimates[s.name]},
                                           "tracefile": workload})
        path = out / f"{s.name}.parquet"
        run = _offline(cfg, offline_time_limit) if s.offline else _online(cfg)
        _write(run, cfg, s.name, path)
        progress(f"{s.name}: done ({path.name})")
        written.append(path)
    return written


@dataclass
class _Run:
    site: object
    leases: list
    end_time: int
    round_records: Optional[list] = None
    offline_stats: object = None


def _online(cfg) -> _Run:
    from optlease.engine.run import simulate

    result = simulate(cfg, out=io.StringIO())
    return _Run(result.site, result.leases, result.end_time, result.round_records)


def _offline(cfg, time_limit: float) -> _Run:
    """The clairvoyant optimum of the workload (`optlease optimize`), the configuration's greedy run as its hint."""
    from optlease.engine.run import apply_trace_options, load_workload, simulate, site_of
    from optlease.scheduling.cpsat.offline import greedy_hint, optimize
    from optlease.scheduling.options import SchedulingOptions

    opts = SchedulingOptions.from_config(cfg)
    _, workload = load_workload(cfg)
    requests = apply_trace_options(cfg, workload.requests)
    greedy = simulate(cfg, out=io.StringIO())
    res = optimize(site_of(cfg, workload), requests, opts, time_limit, cfg.get("scheduling", "solver-workers"),
                   cfg.get("scheduling", "solver-seed"), greedy_hint(greedy.leases))
    end = max((lease.end or 0 for lease in res.leases), default=0)
    return _Run(res.site, res.leases, end, offline_stats=res.stats)


def _write(run: _Run, cfg, profile: str, path: Path) -> None:
    from optlease.accounting.datafile import write_run
    from optlease.formats.schedule_json import write_schedule

    write_run(path, _run_data(run, cfg, profile))
    write_schedule(str(path.with_name(path.name[:-len(".parquet")] + ".schedule.json")), run.site, run.leases,
                   cfg.get("simulation", "starttime"))


def _run_data(run: _Run, cfg, profile: str):
    # TODO(merge): the accounting probes' builder replaces this once it is on main
    from optlease.accounting.datafile import RunData
    from optlease.accounting.metrics import lease_records, run_summary
    from optlease.accounting.rounds import round_summary
    from optlease.report import table as t

    s = run_summary(run.site, run.leases, run.end_time)
    be = s["best_effort"]
    per_run = {t.ACCEPTED_AR: s["ar"]["accepted"], t.REJECTED_AR: s["ar"]["rejected"],
               t.ACCEPTED_IM: s["immediate"]["accepted"], t.REJECTED_IM: s["immediate"]["rejected"],
               t.ALL_BE: be["all_completed_at"], t.WAIT_AVG: be["wait_avg"], t.WAIT_MAX: be["wait_max"],
               t.SLOWDOWN: be["bounded_slowdown_avg"], t.UTILIZATION: s["cpu_utilization"],
               t.PREEMPTIONS: s["preemptions"], t.SUSPENSIONS: s["suspensions"], t.MIGRATIONS: s["migrations"]}
    if run.round_records is not None:
        r = round_summary(run.round_records)
        per_run.update({t.ROUND_P50: r["wall_time_s"]["p50"], t.ROUND_P95: r["wall_time_s"]["p95"],
                        t.GAP: r["gap"]["mean"]})
    if run.offline_stats is not None:
        per_run.update({t.ROUND_P50: run.offline_stats.wall_time, t.ROUND_P95: run.offline_stats.wall_time,
                        t.GAP: run.offline_stats.gap, t.OFFLINE_BOUND: run.offline_stats.best_bound})
    leases = [{"id": x["id"], "kind": x["type"], "waiting_time": x["wait"]} for x in lease_records(run.leases)]
    trace = cfg.get("tracefile", "tracefile")
    return RunData(attrs={"profile": profile, "tracefile": str(trace), "injectionfile":
                          str(cfg.get("tracefile", "injectionfile") or ""), "configuration": cfg.text
                          if hasattr(cfg, "text") else ""}, per_run=per_run, per_lease=leases)
