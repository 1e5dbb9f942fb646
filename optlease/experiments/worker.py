"""One run of a sweep, in a worker process: simulate a generated configuration and write its schedule and data file.

The data file is written last, atomically, so that a data file that exists and reads means a finished run (resuming a
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


# set in a local pool's worker processes: where each run says that it began, so that when a worker process dies
# (killed, out of memory, a crash in native code) the sweep knows which runs were under way in it
_starts: Any = None


def note_starts(queue: Any) -> None:
    """A local pool's initializer: runs report their beginning on `queue` (a multiprocessing SimpleQueue)."""
    global _starts
    _starts = queue


def run_one(config: str) -> Outcome:
    """Simulate the configuration at `config` and write its data file and schedule; never raises."""
    if _starts is not None:
        _starts.put(config)
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
    """What `optlease simulate -c CONFIG -q` does with a generated configuration, without its printing."""
    from optlease.accounting.datafile import write_run
    from optlease.accounting.rundata import run_data
    from optlease.cli.simulate_cmd import run_attrs
    from optlease.engine.run import simulate
    from optlease.errors import InputError
    from optlease.formats.config import load_config
    from optlease.formats.schedule_json import write_schedule

    cfg = load_config(config)
    datafile, schedule = cfg.get("accounting", "datafile"), cfg.get("accounting", "schedule-file")
    if not datafile or not schedule:
        raise InputError("[accounting] datafile and schedule-file must be set: the run would leave nothing",
                         str(config))
    result = simulate(cfg, out=None)
    target = cfg.resolve(datafile)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_schedule(str(cfg.resolve(schedule)), result.site, result.leases, cfg.get("simulation", "starttime"),
                   result.images)
    write_run(target, run_data(result, result.accounting, run_attrs(cfg, config, None, None)))
