"""`optlease run-experiments`: the example grid on local processes and on a real Dask cluster of two workers, a
sweep killed halfway and resumed without rerunning what finished, and a failing run that stops no other."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import wait_until
from optlease.accounting.datafile import read_run
from optlease.cli.main import main
from optlease.experiments.progress import progress_for
from optlease.experiments.worker import Outcome

REPO = Path(__file__).resolve().parents[1]
GRID = REPO / "instances" / "experiments"
TRACES = ["withprematureend", "withoutprematureend"]
INJECTIONS = ["+inj1", "+inj2", ""]


def command(tmp_path: Path, *more: str) -> list[str]:
    return ["run-experiments", "-c", str(GRID / "multi.conf"), "-d", str(tmp_path / "confs"),
            "--datadir", str(tmp_path / "data"), *more]


def check_grid(data: Path, profiles: list[str]) -> None:
    """Every run of `profiles` left a data file that reads, with its schedule beside it, and figures that fit the
    run: 139 best-effort leases, and the 13 ARs of an injection only where there is one."""
    for profile in profiles:
        for trace in TRACES:
            for injection in INJECTIONS:
                datafile = data / f"{profile}_{trace}{injection}.parquet"
                run = read_run(datafile)
                assert (run.attrs["profile"], Path(run.attrs["tracefile"]).stem) == (profile, trace)
                assert Path(run.attrs["injectionfile"]).stem == injection[1:] if injection else \
                    run.attrs["injectionfile"] == ""
                assert f"[tracefile]\ntracefile: {GRID / 'traces' / trace}.lwf" in run.attrs["configuration"]
                ars = run.per_run["accepted_ar"] + run.per_run["rejected_ar"]
                assert (run.per_run["best_effort_total"], ars) == (139, 13 if injection else 0)
                # the schedule beside it, for the report's Gantt chart
                schedule = json.loads((data / f"{profile}_{trace}{injection}.schedule.json").read_text())
                assert len(schedule["leases"]) == 139 + (13 if injection else 0)


def test_a_grid_runs_on_local_processes_as_a_user_runs_it(tmp_path):
    cli = subprocess.Popen([sys.executable, "-m", "optlease.cli.main",
                            *command(tmp_path, "--profiles", "backfilling+SR", "--workers", "2")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = cli.communicate(timeout=120)
    assert cli.returncode == 0, stderr
    check_grid(tmp_path / "data", ["backfilling+SR"])
    # not a terminal: one plain line per run, and the closing summary
    lines = stderr.splitlines()
    assert sorted(line.split("] ok ")[1].split(" (")[0] for line in lines) == \
        sorted(f"backfilling+SR_{t}{i}" for t in TRACES for i in INJECTIONS)
    # in at most two worker processes, not in the command's own
    pids = {int(line.rsplit(":", 1)[1].rstrip(")")) for line in lines}
    assert cli.pid not in pids and 1 <= len(pids) <= 2
    assert stdout.startswith("runs: 6, skipped (done before): 0, ran: 6, failed: 0, wall time: ")


def test_a_grid_runs_on_a_dask_cluster_of_two_workers(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  scheduler_port=0) as cluster:
        code = main(command(tmp_path, "--profiles", "backfilling,backfilling+SR+M", "--scheduler",
                            cluster.scheduler_address))
        worker_pids = {w.pid for w in cluster.workers.values()}
    out, err = capsys.readouterr()
    assert code == 0, err
    check_grid(tmp_path / "data", ["backfilling", "backfilling+SR+M"])
    # the cluster's worker processes ran the grid, not this process
    ran_on = {int(line.rsplit(":", 1)[1].rstrip(")")) for line in err.splitlines() if "] ok " in line}
    assert ran_on <= worker_pids and os.getpid() not in ran_on and len(worker_pids) == 2
    assert "runs: 12, skipped (done before): 0, ran: 12, failed: 0" in out


BAD_RUNS = {
    "workers-and-a-scheduler": (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"],
                                "--workers: --workers sets local processes"),
    "no-dask-address": (["--scheduler", "nonsense://x"], "nonsense://x: not a Dask scheduler address"),
    "port-out-of-range": (["--scheduler", "tcp://127.0.0.1:70000"], "not a Dask scheduler address"),
    "zero-workers": (["--workers", "0"], "--workers"),
}


@pytest.mark.parametrize(("options", "message"), BAD_RUNS.values(), ids=BAD_RUNS.keys())
def test_bad_options_are_one_line_and_nothing_runs(tmp_path, capsys, options, message):
    assert main(command(tmp_path, *options)) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "data").exists()


def test_a_sweep_killed_halfway_resumes_without_rerunning_finished_runs(tmp_path):
    args = [sys.executable, "-m", "optlease.cli.main",
            *command(tmp_path, "--workers", "1", "--profiles", "nobackfilling,backfilling+SR")]
    data = tmp_path / "data"
    sweep = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: len(list(data.glob("*.parquet"))) >= 3, 60, "three runs to finish")
    finally:
        os.killpg(sweep.pid, signal.SIGKILL)   # the CLI and its worker, as a killed terminal would
        sweep.wait(10)
    finished = sorted(data.glob("*.parquet"))
    assert 3 <= len(finished) < 12
    # the runs go workload by workload, both profiles of one trace and injection before the next: what a stopped
    # sweep leaves compares profile with profile
    order = [f"{p}_{t}{i}" for t in TRACES for i in INJECTIONS for p in ("nobackfilling", "backfilling+SR")]
    assert sorted(p.stem for p in finished) == sorted(order[:len(finished)])
    # a data file cut short (a disk that filled up) is no finished run: it is run again
    truncated = finished.pop()
    truncated.write_bytes(truncated.read_bytes()[:100])
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in finished}
    resumed = subprocess.run(args + ["--only-missing"], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert f"runs: 12, skipped (done before): {len(before)}, ran: {12 - len(before)}, failed: 0" in resumed.stdout
    check_grid(data, ["nobackfilling", "backfilling+SR"])
    # the finished runs were not run again: the same files, untouched
    assert {name: (p.stat().st_ino, p.stat().st_mtime_ns) for name in before for p in [data / name]} == before
    assert f"ok {truncated.stem} (" in resumed.stderr


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_sweep_shows_a_bar_with_done_total_and_failures():
    screen = Terminal()
    progress = progress_for(screen)
    progress.start(3)
    progress.outcome(Outcome("confs/a.conf", True, 0.2, worker="h:1"))
    progress.outcome(Outcome("confs/b.conf", False, 0.1, "[scheduling] policy-admission: cannot load", "h:1"))
    progress.outcome(Outcome("confs/c.conf", True, 0.2, worker="h:2"))
    progress.close()
    shown = screen.getvalue()
    assert "3/3" in shown and "1 failed" in shown and "ETA" in shown
    assert "FAILED b: confs/b.conf: [scheduling] policy-admission: cannot load" in shown
    # a log is no terminal: plain lines, no bar
    log = io.StringIO()
    plain = progress_for(log)
    plain.start(1)
    plain.outcome(Outcome("confs/a.conf", True, 0.2, worker="h:1"))
    assert log.getvalue() == "[1/1] ok a (0.2 s on h:1)\n"


def test_failing_runs_are_reported_and_stop_no_other(tmp_path, capsys):
    """Two runs fail: one whose probe does not load in its worker (installed on one machine, not on the workers),
    one that kills its worker process (as the out-of-memory killer would), which breaks a local pool; the sweep
    reports both with their configuration and one line, and the other runs finish."""
    multi = (GRID / "multi.conf").read_text().split("[common:general]")[1]
    conf = tmp_path / "multi.conf"
    conf.write_text(f"[multi]\ntracedir: {GRID / 'traces'}\ntracefiles: withprematureend.lwf\nbasedatadir: data\n"
                    f"[common:general]{multi}\n"
                    f"[broken:accounting]\nprobes: nosuch.module.Probe\n[broken:scheduling]\nsuspension: none\n"
                    f"[crash:accounting]\nprobes: experiments_crash.KillsItsProcess\n"
                    f"[crash:scheduling]\nsuspension: none\n")
    code = main(["run-experiments", "-c", str(conf), "-d", str(tmp_path / "confs"), "--workers", "2",
                 "--profiles", "backfilling,crash,nobackfilling,broken,backfilling+SR"])
    out, err = capsys.readouterr()
    assert code == 1, err
    assert sorted(p.name for p in (tmp_path / "data").glob("*.parquet")) == \
        sorted(f"{p}_withprematureend.parquet" for p in ["backfilling", "nobackfilling", "backfilling+SR"])
    assert "runs: 5, skipped (done before): 0, ran: 5, failed: 2" in out
    confs = tmp_path / "confs"
    assert f"failed: {confs / 'crash_withprematureend.conf'}: its worker process died" in out
    assert f"failed: {confs / 'broken_withprematureend.conf'}: [accounting] probes: cannot load probe " \
           f"'nosuch.module.Probe'" in out
    assert err.count("FAILED ") == 2


def test_a_dask_worker_killed_mid_run_fails_that_run_alone(tmp_path, capsys):
    """On a Dask cluster a run that kills its worker process (the out-of-memory killer, a crash in native code) is
    rescheduled by Dask on another worker, which dies in turn; once Dask gives up (KilledWorker) the sweep reports that
    run as failed with its configuration and one line, and the other runs of the sweep finish on the workers the
    nannies restarted."""
    distributed = pytest.importorskip("distributed")
    multi = (GRID / "multi.conf").read_text().split("[common:general]")[1]
    conf = tmp_path / "multi.conf"
    conf.write_text(f"[multi]\ntracedir: {GRID / 'traces'}\ntracefiles: withprematureend.lwf\nbasedatadir: data\n"
                    f"[common:general]{multi}\n"
                    f"[crash:accounting]\nprobes: experiments_crash.KillsItsProcess\n"
                    f"[crash:scheduling]\nsuspension: none\n")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  scheduler_port=0) as cluster:
        code = main(["run-experiments", "-c", str(conf), "-d", str(tmp_path / "confs"),
                     "--profiles", "backfilling,crash,nobackfilling", "--scheduler", cluster.scheduler_address])
    out, err = capsys.readouterr()
    assert code == 1, err
    assert sorted(p.name for p in (tmp_path / "data").glob("*.parquet")) == \
        sorted(f"{p}_withprematureend.parquet" for p in ["backfilling", "nobackfilling"])
    assert "runs: 3, skipped (done before): 0, ran: 3, failed: 1" in out
    crash = tmp_path / "confs" / "crash_withprematureend.conf"
    failed = [line for line in out.splitlines() if line.startswith("failed: ")]
    assert len(failed) == 1 and failed[0].startswith(f"failed: {crash}: the worker failed: KilledWorker: ")
    assert err.count("FAILED ") == 1 and err.count("] ok ") == 2
