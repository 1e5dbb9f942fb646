"""One CPU unit end to end, Haizea's: 100 = one core. `list-hosts` shows a 16-vCPU host as CPU 1600, `request-lease
-c 400` asks for four vCPUs, and the domain that starts has four."""
from __future__ import annotations

import subprocess
import sys

from conftest import REPO
from mqtt_broker import free_port
from optlease.domain.site import Site
from optlease.enact.base import HostInfo, VmTask
from optlease.enact.mqtt_jobs import minimal_domain_xml
from optlease.engine.daemon_site import site_from_agents
from optlease.formats.config import parse_config
from optlease.formats.daemon_config import daemon_config
from optlease.reconcile import desired_state, rows_of_leases
from optlease.scheduling.records import RR, Lease
from optlease.domain.lease import LeaseKind, LeaseRequest


class Announced:
    """What site_from_agents reads of an enactor: the hosts as they announced themselves."""

    def __init__(self, **vcpus) -> None:
        self._hosts = {h: HostInfo(h, {"vcpus": n, "memory_mb": 4096}) for h, n in vcpus.items()}

    def hosts(self):
        return self._hosts


def test_a_host_of_16_vcpus_is_1600_cpu_units():
    cfg = parse_config(daemon_config(port=free_port(), persistence_file="none", resources="from-agents",
                                     scheduling={"suspension": "none"}, mode="fast",
                                     mqtt={"hosts": "big small", "hosts-wait": 1}))
    site = site_from_agents(cfg, Announced(big=16, small=2))
    assert site.capacity(1)["CPU"] == 1600 and site.capacity(2)["CPU"] == 200


def test_request_lease_takes_more_than_one_core():
    """-c 400 is four cores, not an error: the request goes out (and finds no daemon here)."""
    done = subprocess.run([sys.executable, "-m", "optlease.cli.main", "request-lease", "-s",
                           f"http://127.0.0.1:{free_port()}", "-t", "best_effort", "-d", "00:10:00", "-n", "1",
                           "-c", "400"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "-c" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_400_units_start_a_domain_of_four_vcpus():
    site = Site.homogeneous(1, {"CPU": 800, "Memory": 4096})
    req = LeaseRequest(id=1, kind=LeaseKind.BEST_EFFORT, arrival=0, duration=600,
                       vms=({"CPU": 400, "Memory": 1024},), start=None)
    lease = Lease(req, {1: (400, 1024)})
    lease.vmrrs.append(RR(lease, "vm", 0, 600, {1: 1}, {1: (400, 1024)}, 0))      # placed by hand on node 1
    (want,) = desired_state(rows_of_leases([lease]), 10, {1: "h1"}).values()
    assert (want.host, want.vcpus, want.memory_mb) == ("h1", 4, 1024)
    assert "<vcpu>4</vcpu>" in minimal_domain_xml(VmTask("start", 1, 1, "h1", memory_mb=1024, vcpus=want.vcpus))
    assert site.capacity(1)["CPU"] // 100 == 8
