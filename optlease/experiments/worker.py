"""One run of a sweep, in a worker process: simulate a generated configuration and write its data file.

The schedule JSON goes beside the data file (`X.parquet` -> `X.schedule.json`, what the report looks for) and the
data file is written last, atomically, so that a data file that exists and reads means a finished run (resuming a
sweep relies on it). Every failure comes back as an Outcome with one line: a run never takes its worker down.
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Outcome:
    config: str                 # the individual configuration's path
    ok: bool
    seconds: float
    error: str = ""             # one line when not ok
    worker: str = ""            # HOST:PID of the process that ran it


def here() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def schedule_path(datafile: Path) -> Path:
    """Where a run's schedule goes: beside its data file, `X.parquet` -> `X.schedule.json`."""
    return datafile.with_name(datafile.name.rsplit(".", 1)[0] + ".schedule.json")


def attributes(text: str) -> dict[str, str]:
    """[accounting] attributes, `key=value,key=value` as Haizea writes them."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, eq, value = item.partition("=")
        if eq and key.strip():
            out[key.strip()] = value.strip()
    return out


def flatten(summary: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested run figures as flat `a.b` names (lists, which name leases, stay in the per-lease rows)."""
    out: dict[str, Any] = {}
    for key, value in summary.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        elif not isinstance(value, list):
            out[prefix + key] = value
    return out


def run_one(config: str) -> Outcome:
    """Simulate the configuration at `config` and write its data file and schedule; never raises."""
    began = time.perf_counter()
    try:
        _simulate_and_write(Path(config))
    except Exception as exc:  # noqa: BLE001 - a run's failure is reported, never lets the sweep down
        from optlease.errors import InputError

        what = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
        line = (what.strip().splitlines() or [type(exc).__name__])[0]
        return Outcome(config, False, time.perf_counter() - began, line[:300], here())
    return Outcome(config, True, time.perf_counter() - began, worker=here())


def _simulate_and_write(config: Path) -> None:
    from optlease.accounting.datafile import RunData, write_run
    from optlease.accounting.metrics import lease_records, run_summary
    from optlease.engine.run import simulate
    from optlease.errors import InputError
    from optlease.formats.config import load_config
    from optlease.formats.schedule_json import write_schedule

    cfg = load_config(config)
    datafile = cfg.get("accounting", "datafile")
    if not datafile:
        raise InputError("[accounting] datafile is not set: the run would leave nothing", str(config))
    target = cfg.resolve(datafile)
    result = simulate(cfg, out=None)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_schedule(str(schedule_path(target)), result.site, result.leases, cfg.get("simulation", "starttime"))
    attrs = attributes(cfg.get("accounting", "attributes"))
    summary = flatten(run_summary(result.site, result.leases, result.end_time))
    summary["wall_time_s"] = round(result.wall_time, 3)
    write_run(target, RunData(
        attrs={"profile": attrs.get("profile", ""), "tracefile": attrs.get("tracefile", ""),
               "injectionfile": attrs.get("injectionfile", ""), "configuration": config.read_text()},
        per_run=summary, per_lease=lease_records(result.leases)))
