"""Every workload and configuration in instances/ loads, with the lease counts its README promises, and every
configuration is a valid one."""
from __future__ import annotations

import pytest

from optlease.domain.lease import LeaseKind
from optlease.formats.config import load_config
from optlease.formats.traces import load_trace

from conftest import INSTANCES

COUNTS = {
    "blue/1000requests.swf": (951, 0), "blue/15days.swf": (3084, 0), "blue/30days.swf": (5108, 0),
    "blue/60days.swf": (9453, 0),
    "blue/injected/15days-work_30-dur_2h-size_1small.lwf": (612, 612),
    "blue/injected/work_10-dur_2h-size_1small.lwf": (411, 411),
    "blue/injected/work_10-dur_2h-size_2medium.lwf": (141, 141),
    "blue/injected/work_10-dur_2h-size_3large.lwf": (86, 86),
    "blue/injected/work_20-dur_2h-size_1small.lwf": (820, 820),
    "blue/injected/work_20-dur_2h-size_2medium.lwf": (285, 285),
    "blue/injected/work_20-dur_2h-size_3large.lwf": (172, 172),
    "blue/injected/work_30-dur_2h-size_1small.lwf": (1231, 1231),
    "blue/injected/work_30-dur_2h-size_2medium.lwf": (428, 428),
    "blue/injected/work_30-dur_2h-size_3large.lwf": (257, 257),
    "haizea/tests/migrate.lwf": (3, 2), "haizea/tests/preemption.lwf": (2, 1),
    "haizea/tests/preemption_prematureend.lwf": (2, 1), "haizea/tests/preemption_prematureend2.lwf": (2, 1),
    "haizea/tests/reservation.lwf": (2, 0), "haizea/tests/reservation_prematureend.lwf": (2, 0),
    "haizea/tests/reuse1.lwf": (2, 1), "haizea/tests/reuse2.lwf": (3, 2), "haizea/tests/wait.lwf": (8, 0),
    "haizea/expected/quickstart.lwf": (2, 1), "quickstart/quickstart.lwf": (2, 1),
    "experiments/traces/inj1.lwf": (13, 13), "experiments/traces/inj2.lwf": (13, 13),
    "experiments/traces/withoutprematureend.lwf": (139, 0), "experiments/traces/withprematureend.lwf": (139, 0),
    "suite/synthetic/s01-8n-load60.lwf": (94, 9), "suite/synthetic/s02-8n-load90.lwf": (87, 13),
    "suite/synthetic/s03-12n-load80.lwf": (157, 24), "suite/synthetic/s04-16n-exact.lwf": (160, 51),
    "suite/synthetic/s05-32n-load95.lwf": (245, 29), "suite/synthetic/s06-64n-load70.lwf": (266, 50),
    "suite/synthetic/s07-24n-hetero.lwf": (268, 41), "suite/synthetic/s08-32n-gpu.lwf": (289, 67),
    "suite/synthetic/s09-48n-hetero.lwf": (273, 26), "suite/synthetic/s10-64n-hetero.lwf": (75, 8),
    "suite/tuning/t01-10n-load75.lwf": (120, 18), "suite/tuning/t02-20n-load90.lwf": (241, 27),
    "suite/tuning/t03-40n-load80.lwf": (336, 64), "suite/tuning/t04-64n-load85.lwf": (272, 41),
    "suite/tuning/t05-28n-hetero.lwf": (152, 21), "suite/tuning/t06-40n-hetero.lwf": (208, 36),
}
SIZES = {"1small": (1, 24), "2medium": (25, 48), "3large": (49, 72)}


def test_every_trace_is_listed():
    found = {str(p.relative_to(INSTANCES)) for p in INSTANCES.rglob("*") if p.suffix in (".lwf", ".swf")}
    assert found == set(COUNTS)


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_trace_loads_with_its_counts(name):
    workload = load_trace(INSTANCES / name)
    total, ars = COUNTS[name]
    assert len(workload.requests) == total
    assert sum(r.kind is LeaseKind.AR for r in workload.requests) == ars
    for size, (low, high) in SIZES.items():
        if size in name:  # the injection's size class bounds every AR's node count
            assert all(low <= r.numnodes <= high for r in workload.requests)


# daemon/: tests/test_daemon_recovery.py; experiments/ and suite/ hold multi-configurations: tests/test_multiconfig.py
# and tests/test_quality_suite.py
@pytest.mark.parametrize("conf", sorted(str(p.relative_to(INSTANCES)) for p in INSTANCES.rglob("*.conf")
                                        if p.parent.name not in ("daemon", "experiments", "suite")))
def test_configuration_is_valid(conf):
    cfg = load_config(INSTANCES / conf)
    assert cfg.get("general", "mode") == "simulated"
    assert cfg.resolve(cfg.get("tracefile", "tracefile")).exists()
