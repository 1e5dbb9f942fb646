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
        if s.offline:
            _offline(cfg, s.name, estimates[s.name], path, offline_time_limit)
        else:
            _online(cfg, s.name, estimates[s.name], path)
        progress(f"{s.name}: done ({path.name})")
        written.append(path)
    return written


def _online(cfg, name: str, estimate: str, path: Path):
    """A simulation of the workload under the scheduler: its data file (the probes' data) and its schedule."""
    from optlease.accounting.rundata import run_data
    from optlease.engine.run import simulate

    result = simulate(cfg, out=io.StringIO())
    _write(cfg, result, run_data(result, result.accounting, _attrs(cfg, name, estimate)), path)


def _offline(cfg, name: str, estimate: str, path: Path, time_limit: float):
    """The clairvoyant optimum of the workload (`optlease optimize`), the configuration's greedy run as its hint.
    It is not a simulation: no probe watches it, so its data file has optlease's own figures of the schedule and
    the solver's (one round: its wall time, gap, objective and proven bound)."""
    from optlease.accounting.collection import AccountingDataCollection
    from optlease.accounting.rundata import run_data
    from optlease.engine.run import apply_trace_options, load_workload, simulate, site_of
    from optlease.engine.simulator import SimulationResult
    from optlease.report.table import GAP, OFFLINE_BOUND, ROUND_P50, ROUND_P95
    from optlease.scheduling.cpsat.offline import greedy_hint, optimize
    from optlease.scheduling.options import SchedulingOptions

    opts = SchedulingOptions.from_config(cfg)
    _, workload = load_workload(cfg)
    requests = apply_trace_options(cfg, workload.requests)
    greedy = simulate(cfg, out=io.StringIO())
    res = optimize(site_of(cfg, workload), requests, opts, time_limit, hint=greedy_hint(greedy.leases))
    stats = res.stats
    end = max((lease.end or 0 for lease in res.leases), default=0)
    result = SimulationResult(res.site, res.leases, end, stats.wall_time, opts, rounds=1)
    data = run_data(result, AccountingDataCollection(), _attrs(cfg, name, estimate))
    data.per_run.update({ROUND_P50: stats.wall_time, ROUND_P95: stats.wall_time, GAP: stats.gap,
                         OFFLINE_BOUND: stats.best_bound, "offline_objective": stats.objective,
                         "offline_status": stats.status, "mapper": "offline"})
    _write(cfg, result, data, path)


def _attrs(cfg, name: str, estimate: str) -> dict[str, str]:
    """The run's labels: the scheduler is its profile; the workload; the configuration's text."""
    return {"profile": name, "tracefile": str(cfg.get("tracefile", "tracefile")),
            "injectionfile": str(cfg.get("tracefile", "injectionfile") or ""),
            "configuration": Path(cfg.path).read_text(), "runtime_estimate": estimate}


def _write(cfg, result, data, path: Path) -> None:
    from optlease.accounting.datafile import write_run
    from optlease.formats.schedule_json import write_schedule

    write_run(path, data)
    write_schedule(str(path.with_name(path.name[:-len(".parquet")] + ".schedule.json")), result.site,
                   result.leases, cfg.get("simulation", "starttime"), getattr(result, "images", None))
