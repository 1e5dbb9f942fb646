"""`optlease generate-workload`: deterministic for a seed, the offered load it claims is the load it writes, the
model's distributions as the paper gives them, a configuration that simulates and checks, hostile arguments as one
line."""
from __future__ import annotations

import math
import random
import re

import pytest
from hypothesis import given, settings, strategies as st

from conftest import run_cli
from inproc import optlease
from optlease.domain.lease import LeaseKind
from optlease.formats.lwf import load_lwf
from optlease.workload import lublin
from optlease.workload.generate import offered_load

HETERO = ["--nodes", "8 CPU:100 Memory:2048", "--nodes", "4 CPU:200 Memory:4096 GPU:1"]
MIXED = [*HETERO, "--ar-share", "0.2", "--ar-notice", "00:30:00", "--immediate-share", "0.1", "--overestimate", "3",
         "--premature-share", "0.5"]


def generate(tmp_path, name: str, *args: str, cli=optlease):
    out = tmp_path / f"{name}.lwf"
    proc = cli("generate-workload", "-o", out, *args)
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


def test_same_seed_same_bytes_other_seed_other_workload(tmp_path):
    # two interpreters (each with its own hash seed) write the same bytes
    a, _ = generate(tmp_path, "a", *MIXED, "--load", "0.6", "--seed", "11", cli=run_cli)
    b, _ = generate(tmp_path, "b", *MIXED, "--load", "0.6", "--seed", "11", cli=run_cli)
    c, _ = generate(tmp_path, "c", *MIXED, "--load", "0.6", "--seed", "12")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


@pytest.mark.parametrize("args, load", [
    (["--nodes", "4 CPU:100 Memory:1024", "--horizon", "12:00:00"], 0.5),
    (HETERO, 0.9),
    (["--nodes", "32 CPU:400 Memory:8192", "--vm", "CPU:100 Memory:1024", "--vm", "CPU:200 Memory:2048",
      "--horizon", "86400"], 1.2),
], ids=["4-nodes", "heterogeneous", "32-nodes-two-shapes"])
def test_the_load_it_claims_is_the_load_it_writes(tmp_path, args, load):
    out, said = generate(tmp_path, "w", *args, "--load", str(load), "--seed", "5")
    workload = load_lwf(out)
    horizon = 12 * 3600 if "12:00:00" in args else 86400
    written = offered_load(workload.requests, workload.site, horizon)
    claimed = float(re.search(r"Offered load ([0-9.]+) of the CPU", said).group(1))
    assert claimed == pytest.approx(written, abs=5e-5)
    # leases are drawn until their work reaches the load: over by less than one lease's share
    assert load <= written < load * 1.25
    assert all(0 <= r.arrival < horizon for r in workload.requests)


def test_kinds_notice_estimates_and_widths(tmp_path):
    out, _ = generate(tmp_path, "w", *MIXED, "--load", "2", "--seed", "3")
    workload = load_lwf(out)
    requests = workload.requests
    assert len(workload.site.nodes) == 12 and "GPU" in workload.site.resource_types
    kinds = {k: [r for r in requests if r.kind is k] for k in LeaseKind}
    assert abs(len(kinds[LeaseKind.AR]) / len(requests) - 0.2) < 0.1
    assert abs(len(kinds[LeaseKind.IMMEDIATE]) / len(requests) - 0.1) < 0.08
    for r in kinds[LeaseKind.AR]:
        assert 900 <= r.start - r.arrival <= 2700 and not r.preemptible
    assert all(r.preemptible for r in kinds[LeaseKind.BEST_EFFORT])
    early = [r for r in requests if r.real_duration is not None]
    assert 0.3 < len(early) / len(requests) < 0.7
    assert all(r.real_duration < r.duration <= math.ceil(3 * r.real_duration) for r in early)
    # 8 nodes hold one such VM each, 4 nodes two: no lease is wider than 16
    assert max(r.numnodes for r in requests) <= 16


def test_the_configuration_simulates_and_the_schedule_checks(tmp_path):
    conf = tmp_path / "run" / "w.conf"
    generate(tmp_path, "w", *MIXED, "--load", "0.7", "--seed", "8", "--conf", conf)
    sched = tmp_path / "w.schedule.json"
    proc = optlease("simulate", "-c", conf, "-q", "--schedule-out", sched)
    assert proc.returncode == 0, proc.stderr
    assert "best-effort leases completed:" in proc.stderr
    checked = optlease("check", sched)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_size_and_runtime_distributions_follow_the_paper():
    rng = random.Random(1)
    sizes = lublin.SizeModel(128)
    drawn = [sizes.draw(rng) for _ in range(20000)]
    assert abs(drawn.count(1) / len(drawn) - lublin.SERIAL_PROB) < 0.015
    parallel = [s for s in drawn if s > 1]
    powers = sum(1 for s in parallel if s & (s - 1) == 0)
    # power-of-two rounding, plus the sizes that are powers of two anyway
    assert powers / len(parallel) > lublin.POW2_PROB
    # log runtime of a serial job: hyper-gamma mean p*a1*b1 + (1-p)*a2*b2 with p = pa + pb
    p = lublin.PA + lublin.PB
    mean = p * lublin.A1 * lublin.B1 + (1 - p) * lublin.A2 * lublin.B2
    logs = [math.log(lublin.runtime(rng, 1)) for _ in range(20000)]
    assert sum(logs) / len(logs) == pytest.approx(mean, abs=0.08)


@settings(max_examples=60, deadline=None)
@given(largest=st.integers(1, 5000), seed=st.integers(0, 2 ** 32))
def test_sizes_and_runtimes_stay_in_bounds(largest, seed):
    rng = random.Random(seed)
    size = lublin.SizeModel(largest).draw(rng)
    assert 1 <= size <= largest
    assert 1 <= lublin.runtime(rng, size) <= round(math.exp(lublin.LOG_RUNTIME_CAP))


@pytest.mark.parametrize("args, words", [
    (["--load", "0"], "--load: must be in (0, 10]"),
    (["--load", "1e9"], "--load: must be in (0, 10]"),
    (["--load", "nan"], "--load: must be in (0, 10]"),
    (["--load", "0.5", "--ar-share", "0.7", "--immediate-share", "0.5"], "add up to more than 1"),
    (["--load", "0.5", "--ar-share", "-0.1"], "--ar-share: must be in [0, 1]"),
    (["--load", "0.5", "--horizon", "yesterday"], "--horizon:"),
    (["--load", "0.5", "--horizon", "0"], "--horizon: must be between 1 s and 366 days"),
    (["--load", "0.5", "--premature-share", "0.5"], "give --overestimate above 1"),
    (["--load", "0.5", "--vm", "CPU:100 Memory:1024 GPU:1"], "'GPU' is on no node"),
    (["--load", "0.5", "--vm", "CPU:1000 Memory:1024"], "fits on no node"),
    (["--load", "0.5", "--vm", "CPU:-5"], "not TYPE:AMOUNT with a positive whole amount"),
    (["--load", "0.5", "--vm", "Memory:10"], "a VM needs CPU"),
    (["--load", "5", "--horizon", "300:00:00:00", "--max-leases", "50"], "more than 50 leases"),
    (["--load", "0.5", "--seed", "x"], "--seed"),
], ids=["zero-load", "huge-load", "nan-load", "shares", "negative-share", "bad-horizon", "zero-horizon",
        "premature-without-overestimate", "unknown-type", "too-big-vm", "negative-amount", "no-cpu",
        "too-many-leases", "bad-seed"])
def test_hostile_arguments_are_one_line(tmp_path, args, words):
    out = tmp_path / "w.lwf"
    proc = optlease("generate-workload", "-o", out, "--nodes", "4 CPU:100 Memory:1024", *args)
    assert proc.returncode != 0 and words in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("nodes, words", [
    ("x CPU:100 Memory:1024", "does not start with a positive number of nodes"),
    ("200000 CPU:100 Memory:1024", "more than 100000 nodes"),
    ("4 CPU:100", "no Memory resource type"),
    ("4 " + "CPU:1 " * 2000, "too long"),
], ids=["no-count", "too-many-nodes", "no-memory", "too-long"])
def test_hostile_node_sets_are_one_line(tmp_path, nodes, words):
    proc = optlease("generate-workload", "-o", tmp_path / "w.lwf", "--nodes", nodes, "--load", "0.5")
    assert proc.returncode != 0 and words in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
