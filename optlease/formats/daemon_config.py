"""The configuration text of a daemon on this machine's loopback interface, as tests and benchmarks start one."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from optlease.formats.config import render_config

LOOPBACK = "127.0.0.1"
RATES = {"suspend-rate": 32, "resume-rate": 32}    # MB/s, the manual's sample configurations


def daemon_config(*, port: int, persistence_file: str, resources: str, scheduling: Mapping[str, Any],
                  mode: str = "simulated", general: Mapping[str, Any] | None = None,
                  simulation: Mapping[str, Any] | None = None, mqtt: Mapping[str, Any] | None = None) -> str:
    """A daemon on a real clock with its API on the loopback `port`, its leases in `persistence_file` and the site
    `resources`; suspension and resumption at 32 MB/s unless `scheduling` says otherwise. `general`, `simulation`
    and `mqtt` add options to their sections (no [mqtt] section without `mqtt`)."""
    sections: dict[str, Mapping[str, Any]] = {
        "general": {"mode": mode, "persistence-file": persistence_file, **(general or {})},
        "scheduling": {**RATES, **scheduling},
        "simulation": {"clock": "real", "resources": resources, "imagetransfer-bandwidth": 100, **(simulation or {})},
        "accounting": {},
        "daemon": {"listen": f"{LOOPBACK}:{port}"},
    }
    if mqtt is not None:
        sections["mqtt"] = mqtt
    return render_config(sections)


def fast_daemon_config(*, port: int, broker_port: int, hosts: Iterable[str], persistence_file: str, resources: str,
                       time_scale: float, scheduling: Mapping[str, Any], general: Mapping[str, Any] | None = None,
                       mqtt: Mapping[str, Any] | None = None) -> str:
    """daemon_config in mode fast: enactment by the agents of `hosts` (node order) over the broker on the loopback
    `broker_port`, the clock running `time_scale` simulated seconds a real second; `mqtt` adds options such as
    task-timeout. The loopback broker of tests and benchmarks has no credentials: `insecure: yes` says so."""
    return daemon_config(port=port, persistence_file=persistence_file, resources=resources, scheduling=scheduling,
                         mode="fast", general=general, simulation={"time-scale": time_scale},
                         mqtt={"host": LOOPBACK, "port": broker_port, "hosts": " ".join(hosts), "insecure": "yes",
                               **(mqtt or {})})
