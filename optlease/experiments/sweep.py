"""A sweep: writes a multi-configuration's individual configurations, picks the runs still to do, and runs them on
local processes or on a Dask distributed cluster, reporting each outcome as it arrives.

A run is done when its data file exists and reads (optlease.accounting.datafile.read_run): `only_missing` skips
those, so a sweep that was stopped resumes where it was without rerunning what finished.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Generator, Iterator

from optlease.errors import InputError
from optlease.experiments.worker import Outcome, run_one
from optlease.formats.multiconfig import MultiConfig, Run

CONNECT_TIMEOUT = "10s"   # how long to wait for a Dask scheduler before saying it cannot be reached
# a Dask scheduler's address: tcp:// (its default) or tls://, a host name or address, a port
ADDRESS = re.compile(r"^(?:(tcp|tls)://)?(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def check_address(address: str) -> str:
    """A scheduler address Dask can dial; anything else is refused before any connection is tried."""
    match = ADDRESS.match(address)
    if not match or not 0 < int(match.group(3)) < 65536:
        raise InputError("not a Dask scheduler address: expected tcp://HOST:PORT or tls://HOST:PORT", address)
    return address if match.group(1) else f"tcp://{address}"


@dataclass(frozen=True)
class Task:
    run: Run
    config: Path          # the individual configuration file


@dataclass
class Summary:
    runs: int = 0
    skipped: int = 0                  # done before (only-missing)
    outcomes: list[Outcome] = field(default_factory=list)
    wall_time: float = 0.0

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    def as_dict(self) -> dict[str, object]:
        done = [o.seconds for o in self.outcomes if o.ok]
        return {"runs": self.runs, "skipped": self.skipped, "ran": len(self.outcomes),
                "failures": len(self.failures), "wall_time_s": round(self.wall_time, 2),
                "per_run_s": round(sum(done) / len(done), 3) if done else None}


def generate(multi: MultiConfig, confdir: Path) -> list[Task]:
    """Write every individual configuration into `confdir` as Haizea names it (`NAME.conf`)."""
    runs = multi.runs()   # every configuration checks before any file is written
    confdir = confdir.resolve()   # a worker on another machine or in another folder finds it by its full path
    confdir.mkdir(parents=True, exist_ok=True)
    tasks = []
    for run in runs:
        path = confdir / f"{run.name}.conf"
        _write_atomically(path, run.text())
        tasks.append(Task(run, path))
    return tasks


def _write_atomically(path: Path, text: str) -> None:
    # a sweep killed while writing leaves the old file or the new one, never half of one
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def finished(datafile: Path) -> bool:
    """Whether a run left a data file that reads."""
    from optlease.accounting.datafile import read_run

    if not datafile.is_file():
        return False
    try:
        read_run(datafile)
    except InputError:
        return False
    return True


def in_workload_order(tasks: list[Task]) -> list[Task]:
    """The runs workload by workload (every profile of the first trace and injection, then of the next), profiles in
    the file's order: a sweep stopped early, or a grid too large for the time at hand, leaves runs that compare with
    each other, rather than one profile's runs alone."""
    first: dict[tuple[Path, Path | None], int] = {}
    for task in tasks:
        first.setdefault((task.run.tracefile, task.run.injectionfile), len(first))
    return sorted(tasks, key=lambda t: first[(t.run.tracefile, t.run.injectionfile)])


def run_sweep(tasks: list[Task], only_missing: bool = False, workers: int | None = None,
              scheduler: str | None = None, on_start: Callable[[int], None] = lambda total: None,
              on_outcome: Callable[[Outcome], None] = lambda outcome: None) -> Summary:
    """Run `tasks`, in parallel; `on_start(count)` once the runs to do are known, `on_outcome` after each."""
    began = time.perf_counter()
    summary = Summary(runs=len(tasks))
    todo = [t for t in in_workload_order(tasks) if not (only_missing and finished(t.run.datafile))]
    summary.skipped = len(tasks) - len(todo)
    for task in todo:
        task.run.datafile.parent.mkdir(parents=True, exist_ok=True)
    on_start(len(todo))
    configs = [str(t.config) for t in todo]
    outcomes = _on_dask(configs, scheduler) if scheduler else _on_processes(configs, workers)
    for outcome in outcomes:
        summary.outcomes.append(outcome)
        on_outcome(outcome)
    summary.wall_time = time.perf_counter() - began
    return summary


def _on_processes(configs: list[str], workers: int | None) -> Iterator[Outcome]:
    """Each run in a process of a local pool. A worker process that dies breaks the whole pool: the runs that had
    not begun go on in a new pool, and those under way in it are run again one at a time, so that the one that
    kills its worker fails alone and the others finish."""
    count = max(1, min(workers or os.cpu_count() or 1, len(configs) or 1))
    todo = list(configs)
    while todo:
        broken = yield from _pool(todo, count)
        if broken is None:
            return
        suspects, todo = broken
        if not suspects:   # the processes die before any run begins: no new pool would fare better
            for config in todo:
                yield Outcome(config, False, 0.0, "the local worker processes died before the run began")
            return
        for config in suspects:
            again = yield from _pool([config], 1)
            if again is not None:
                yield Outcome(config, False, 0.0, "its worker process died (killed, out of memory or crashed), "
                                                  "twice")


def _pool(configs: list[str], count: int) -> Generator[Outcome, None, tuple[list[str], list[str]] | None]:
    """Run `configs` in a pool of `count` spawned processes (no lock of this process's threads is inherited);
    None when all came back, else (the runs under way when a worker process died, the runs not begun)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    from optlease.experiments.worker import note_starts

    context = multiprocessing.get_context("spawn")
    starts = context.SimpleQueue()
    returned: set[str] = set()
    with ProcessPoolExecutor(count, mp_context=context, initializer=note_starts, initargs=(starts,)) as pool:
        futures = {pool.submit(run_one, c): c for c in configs}
        for future in as_completed(futures):
            try:
                outcome = future.result()
            except BrokenProcessPool:
                break
            returned.add(futures[future])
            yield outcome
        else:
            return None
        # the pool is broken: keep what finished before it broke, sort out the rest
        for future, config in futures.items():
            if config not in returned and future.done() and not future.cancelled() and future.exception() is None:
                returned.add(config)
                yield future.result()
    begun: set[str] = set()
    while not starts.empty():
        begun.add(starts.get())
    rest = [c for c in configs if c not in returned]
    return [c for c in rest if c in begun], [c for c in rest if c not in begun]


def _on_dask(configs: list[str], address: str) -> Iterator[Outcome]:
    """Each run as a task of the Dask distributed cluster whose scheduler is at `address`."""
    from distributed import Client, as_completed

    try:
        client = Client(check_address(address), timeout=CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise InputError(f"cannot reach the Dask scheduler ({str(exc).splitlines()[0] if str(exc) else exc!r})",
                         address) from None
    try:
        # pure=False: a rerun of the same configuration is a new run, not a cached result
        futures = {client.submit(run_one, c, pure=False, key=f"optlease-run-{Path(c).stem}-{i}"): c
                   for i, c in enumerate(configs)}
        for future in as_completed(futures, loop=client.loop):
            yield _result(future, futures[future])
    finally:
        client.close()


def _result(future, config: str) -> Outcome:
    """A run's Outcome; a worker that died (killed, out of memory) is that run's failure, not the sweep's."""
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001 - BrokenProcessPool, KilledWorker, lost connection
        line = (str(exc).strip().splitlines() or [""])[0]
        return Outcome(config, False, 0.0, f"the worker failed: {type(exc).__name__}: {line}"[:300])
