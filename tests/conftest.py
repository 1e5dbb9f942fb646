"""Shared test helpers: where things are, the smallest configuration, and running the CLI as a real subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import settings

from optlease.formats.config import render_config

# CI runs are reproducible; local runs keep exploring new random cases.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

REPO = Path(__file__).resolve().parents[1]
INSTANCES = REPO / "instances"


def wait_until(cond, timeout: float, what: str, poll: float = 0.05):
    """Poll `cond` until it is true (returning its value) or fail after `timeout` seconds: tests never hang."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def simulated_config(resources: str, clock: str = "real", starttime: str | None = None,
                     tracefile: str | None = None) -> str:
    """The smallest configuration text in mode simulated: the site `resources`, images at 100 MB/s, every lease
    suspendable at 32 MB/s; a [simulation] starttime and a [tracefile] section only when given."""
    start = {"starttime": starttime} if starttime else {}
    sections = {
        "general": {"mode": "simulated"},
        "simulation": {"clock": clock, **start, "resources": resources, "imagetransfer-bandwidth": 100},
        "scheduling": {"suspension": "all", "suspend-rate": 32, "resume-rate": 32},
        "accounting": {},
    }
    if tracefile:
        sections["tracefile"] = {"tracefile": tracefile}
    return render_config(sections)


DAEMON_CONF = """[general]
loglevel: INFO
mode: simulated
persistence-file: state.db
{general}
[scheduling]
suspension: all
suspend-rate: 32
resume-rate: 32
wakeup-interval: 5
backfilling: aggressive

[simulation]
clock: real
resources: 4 CPU:100 Memory:1024
imagetransfer-bandwidth: 100
{sections}
[accounting]

[daemon]
listen: 127.0.0.1:{port}
{daemon}"""


def daemon_config(port: int, general: str = "", sections: str = "", daemon: str = "") -> str:
    """The daemon tests' site (4 nodes, real clock, SQLite state.db beside the configuration) listening on `port`;
    `general`, `sections` (whole sections of their own) and `daemon` are lines added where they belong."""
    return DAEMON_CONF.format(port=port, general=general, sections=sections, daemon=daemon)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`optlease ARGS...` in a fresh interpreter, as a user would run it."""
    return subprocess.run([sys.executable, "-m", "optlease.cli.main", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli():
    return run_cli
