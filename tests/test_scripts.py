"""Every script in scripts/ runs and prints what it promises."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO


def test_bench_simulate_quick_prints_json_figures():
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_simulate.py"), "--quick"],
                         capture_output=True, text=True, check=True, timeout=300)
    run = json.loads(out.stdout)["1000requests-aggressive"]
    assert run["be_completed"] == 951 and run["wall_time_s"] > 0
    assert abs(run["wait_avg_s"] - 376.3) / 376.3 < 0.05


def test_bench_restart_prints_its_replay_figures():
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_restart.py"), "--entries", "200"],
                         capture_output=True, text=True, check=True, timeout=300)
    run = json.loads(out.stdout)
    assert run["entries"] == 200 and run["leases"] == 100 and run["consistent"] is True
    assert run["replay_s"] > 0 and run["replay_entries_per_s"] > 0
