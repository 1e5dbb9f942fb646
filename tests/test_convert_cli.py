"""`optlease convert swf2lwf|lwf2xml` as users run it: real traces out as LWF XML, bad input as one error line."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from optlease.formats.lwf import load_lwf, parse_lwf
from optlease.formats.lwf_text import load_text_lwf
from optlease.formats.swf import load_swf

REPO = Path(__file__).resolve().parents[1]
BAD = Path(__file__).parent / "data" / "bad"
BLUE = Path(__file__).resolve().parents[2] / "shared" / "instances" / "haizea" / "blue"
INJECTION = BLUE / "injected_leases" / "30days" / "work_05-dur_1h-size_1small.lwf"
needs_shared = pytest.mark.skipif(not BLUE.is_dir(), reason="the shared Haizea instances are not checked out "
                                                            "next to the repository")


def optlease(*args: str | Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "optlease.cli.main", *map(str, args)], cwd=REPO,
                          capture_output=True, timeout=60)


# SWF file, command-line options, the reader's options they stand for
SWF_RUNS = {
    "1000requests-haizea-defaults": ("1000requests.swf", [], {}),
    "150requests-all-options": ("150requests.swf",
                                ["--queues", "1,2,3", "--scale", "2", "--memory", "2048", "--cpu", "50",
                                 "--non-preemptible"],
                                dict(queues={1, 2, 3}, scale=2, memory=2048, cpu=50, preemptible=False)),
}


@needs_shared
@pytest.mark.parametrize(("name", "options", "reader_options"), SWF_RUNS.values(), ids=SWF_RUNS.keys())
def test_swf2lwf_writes_the_leases_the_swf_reader_reads(tmp_path, name, options, reader_options):
    out = tmp_path / "out.lwf"
    done = optlease("convert", "swf2lwf", BLUE / name, "-o", out, "--site", "144 CPU:100 Memory:1024", *options)
    assert done.returncode == 0, done.stderr.decode()
    written = load_lwf(out)
    assert written.requests == load_swf(BLUE / name, **reader_options).requests
    assert written.site is not None and len(written.site.nodes) == 144
    assert written.name == name


@needs_shared
def test_swf2lwf_writes_to_stdout_without_o():
    done = optlease("convert", "swf2lwf", BLUE / "1000requests.swf")
    assert done.returncode == 0, done.stderr.decode()
    written = parse_lwf(done.stdout)
    assert len(written.requests) == 951 and written.site is None


@needs_shared
def test_lwf2xml_writes_the_leases_of_the_text_file(tmp_path):
    out = tmp_path / "out.lwf"
    done = optlease("convert", "lwf2xml", INJECTION, "-o", out, "--site", "144 CPU:100 Memory:1024")
    assert done.returncode == 0, done.stderr.decode()
    written = load_lwf(out)
    assert written.requests == load_text_lwf(INJECTION).requests
    assert all(r.start is not None for r in written.requests)


# command line, what the one error line must say
BAD_RUNS = {
    "swf-non-numeric": (["swf2lwf", BAD / "swf-non-numeric.swf"], "swf-non-numeric.swf:4: field 4 (run time)"),
    "swf-short-line": (["swf2lwf", BAD / "swf-short-line.swf"], "swf-short-line.swf:4: SWF line has 17 fields"),
    "text-bad-line": (["lwf2xml", BAD / "text-bad-line.lwf"], "text-bad-line.lwf:3: field 5 (nodes)"),
    "missing-file": (["swf2lwf", BAD / "no-such-trace.swf"], "no-such-trace.swf: No such file"),
    "scale-zero": (["swf2lwf", BAD / "swf-short-line.swf", "--scale", "0"], "--scale: must be positive"),
    "memory-negative": (["swf2lwf", BAD / "swf-short-line.swf", "--memory", "-5"], "--memory: must be positive"),
    "site-without-memory": (["swf2lwf", BAD / "swf-short-line.swf", "--site", "4 CPU:100"],
                            "--site: site has no Memory"),
    "site-garbage": (["lwf2xml", BAD / "text-bad-line.lwf", "--site", "many CPU:100 Memory:1024"],
                     "--site: resources must start with the number of nodes"),
    "queues-garbage": (["swf2lwf", BAD / "swf-short-line.swf", "--queues", "one,two"], "--queues: 'one,two'"),
    "scale-not-a-number": (["swf2lwf", BAD / "swf-short-line.swf", "--scale", "lots"], "--scale"),
    "unknown-command": (["xml2swf", BAD / "swf-short-line.swf"], "xml2swf"),
}


@pytest.mark.parametrize(("args", "message"), BAD_RUNS.values(), ids=BAD_RUNS.keys())
def test_bad_input_exits_2_with_one_error_line(tmp_path, args, message):
    out = tmp_path / "out.lwf"
    done = optlease("convert", *args, "-o", out)
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    assert "Traceback" not in stderr
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("optlease: error: ") and message in stderr, stderr
    assert not out.exists()
