"""Every scheduling decision on the Blue traces is kept: the schedule file (`optlease simulate --schedule-out`)
hashes to the sha256 it had before any speed work, on the traces that run fast (the month with FCFS; with
aggressive backfilling and the 10 % AR injection, its first five days; 1000requests.swf on eight times the site), and
with image transfers in the HPDC'08 VM profiles on those five days (recorded when a resume elsewhere began to copy
its disk image over the link)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from optlease.engine.run import simulate
from optlease.formats.config import load_config
from optlease.formats.schedule_stream import schedule_sha256

from conftest import INSTANCES, REPO

BLUE = INSTANCES / "blue"
FIVE_DAYS = 5 * 86_400


def first_days(src: Path, dst: Path, time_field: int) -> str:
    """The requests of `src` that arrive before FIVE_DAYS (SWF: submit time, field 2; old LWF: arrival, field 1)."""
    kept = [line for line in src.read_text().splitlines()
            if not line.strip() or line.startswith(";") or float(line.split()[time_field]) < FIVE_DAYS]
    dst.write_text("\n".join(kept) + "\n")
    return str(dst)


@pytest.mark.parametrize("trace, backfilling, injected, nodes, digest", [
    pytest.param("1000requests.swf", "off", False, 144,
                 "a6fd6b496bf6f467507e426d719e28eee6c8d8126d78369cc9c916f60c06df4b", id="1000requests-fcfs"),
    pytest.param("1000requests.swf", "aggressive", False, 144,
                 "35ebd4131a74952e08bd31ba960a628c323de0cb76e800da4120299187884832", id="1000requests-aggressive"),
    # the same jobs on eight times the site: which idle node each VM lands on
    pytest.param("1000requests.swf", "aggressive", False, 1152,
                 "5753bbf3fae3fdfe70562e1b85caa03a8d8c1ddf6e97e57c0e9e212b228cdaa3", id="1000requests-aggressive-x8"),
    pytest.param("30days.swf", "off", False, 144,
                 "a277f09a7bed8be00b462a288fa7c7f61b21f57e22a25c168eba4bb746d3badf", id="30days-fcfs"),
    pytest.param("5days", "aggressive", True, 144,
                 "08717302a727a98a44b8a8985d727c51a4f1a657a7c4f5cdf0635148a4bb5fe0", id="5days-work10-aggressive"),
    pytest.param("5days", "off", True, 144,
                 "398e1f0a8628d25c96671342f56772fbbb9387a5251261ae635d5520d1f45102", id="5days-work10-fcfs"),
])
def test_schedule_unchanged(tmp_path, trace, backfilling, injected, nodes, digest):
    injection = None
    if trace == "5days":
        trace = first_days(BLUE / "30days.swf", tmp_path / "5days.swf", 1)
        if injected:
            injection = first_days(BLUE / "injected" / "work_10-dur_2h-size_1small.lwf", tmp_path / "5days.lwf", 0)
    else:
        trace = str(BLUE / trace)
    cfg = load_config(BLUE / "blue.conf", overrides={"scheduling": {"backfilling": backfilling},
                                                     "simulation": {"resources": f"{nodes} CPU:100 Memory:1024"}})
    result = simulate(cfg, tracefile=trace, injection=injection)
    # the bytes write_schedule puts in the file (tests/test_schedule_stream.py: json's text of the whole document)
    assert schedule_sha256(result.site, result.leases, cfg.get("simulation", "starttime")) == digest


# The HPDC'08 VM profiles with image transfers (instances/blue/hpdc08-vm.conf, which scripts/bench_simulate.py
# --images runs on the month) on the first five days of the month with the 10 % AR injection: every request given
# one of 37 images of 4,096 MB (scripts/make_imagefile.py's defaults), suspension and migration on, the runtime and
# boot overheads of the paper.
VM_PROFILE = BLUE / "hpdc08-vm.conf"
NOREUSE: dict[str, str] = {}      # the file's own: multicast, no piggybacking, no caches
REUSE = {"avoid-redundant-transfers": "True", "diskimage-reuse": "image-caches", "diskimage-cache-size": "20480"}


def images_file(path: Path) -> Path:
    """scripts/make_imagefile.py's file with its defaults (the study's 37_uniform.images)."""
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_imagefile.py"), "-o", str(path)], check=True,
                   timeout=60)
    return path


@pytest.mark.parametrize("reuse, digest", [
    pytest.param(NOREUSE, "69fa86d0144a3f20579754055f4de19ca826951a6bbf10425acc639131359161",
                 id="5days-work10-vm+noreuse"),
    pytest.param(REUSE, "a68ccc60cd8a3163cb5b1f1077e990f5a370fa2a4f37061b85eef2e93148d4a9", id="5days-work10-vm+reuse"),
])
def test_image_schedule_unchanged(tmp_path, reuse, digest):
    cfg = load_config(VM_PROFILE, overrides={"deploy-imagetransfer": reuse, "tracefile": {
        "tracefile": first_days(BLUE / "30days.swf", tmp_path / "5days.swf", 1),
        "injectionfile": first_days(BLUE / "injected" / "work_10-dur_2h-size_1small.lwf", tmp_path / "5days.lwf", 0),
        "imagefile": str(images_file(tmp_path / "37.images"))}})
    result = simulate(cfg)
    assert result.images.transfers > 0
    assert schedule_sha256(result.site, result.leases, cfg.get("simulation", "starttime"), result.images) == digest
