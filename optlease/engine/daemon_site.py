"""What the daemon runs against: its enactor (simulated, or FAST over MQTT) and its site (from the configuration, or
from what the agents announce)."""
from __future__ import annotations

import time

from optlease.domain.site import Site
from optlease.enact import base as task
from optlease.enact.base import HostInfo, Reported, TaskOutcome, VmTask
from optlease.errors import InputError
from optlease.formats.config import Config


class SimulatedEnactor:
    """Enactment of `mode: simulated`: every task succeeds at once. Keeps when each VM started (for benchmarks)."""

    simulated = True      # nothing can be lost: the daemon only logs what the reconcile step could not plan

    def __init__(self, site: Site) -> None:
        # a site read from a grid description names its nodes; the others are simul-1, simul-2, ...
        named = len(site.details) == len(site.nodes) and len({d.get("name") for d in site.details}) == len(site.nodes)
        names = [site.details[i - 1]["name"] if named else f"simul-{i}" for i in site.node_ids]
        self._hosts = {name: HostInfo(name, dict(site.capacity(i)), True, time.time())
                       for i, name in zip(site.node_ids, names)}
        self._running = Reported()
        self._outcomes: list[TaskOutcome] = []
        self.started_at: dict[str, float] = {}
        self.submitted = 0

    def submit(self, tasks: list[VmTask]) -> None:
        now = time.time()
        for t in tasks:
            self.submitted += 1
            if t.kind in (task.START, task.RESUME):
                self._running[t.vm] = (t.host, "running")
                self.started_at.setdefault(t.vm, now)
            elif t.kind == task.STOP:
                self._running.pop(t.vm, None)
            elif t.kind == task.SUSPEND:
                self._running[t.vm] = (t.host, "saved")
            elif t.kind == task.MIGRATE:
                self._running[t.vm] = (t.destination or t.host, self._running.get(t.vm, ("", "saved"))[1])
            self._outcomes.append(TaskOutcome(t, True))

    def outcomes(self) -> list[TaskOutcome]:
        out, self._outcomes = self._outcomes, []
        return out

    def hosts(self) -> dict[str, HostInfo]:
        return dict(self._hosts)

    def running(self) -> dict[str, tuple[str, str]]:
        return dict(self._running)

    def running_changes(self) -> set[str]:
        return self._running.take_changes()

    def running_delta(self) -> dict[str, tuple[str, str] | None]:
        return self._running.take_delta()

    def hosts_version(self) -> int:
        return 0        # simulated hosts never come or go

    def close(self) -> None:
        pass


def make_enactor(cfg: Config, site: Site):
    """The Enactor the configuration asks for: simulated (answers at once) or FAST over MQTT."""
    mode = cfg.get("general", "mode")
    if mode == "simulated":
        return SimulatedEnactor(site)
    try:
        from optlease.enact.mqtt import MqttEnactor  # written separately; loaded only for mode: fast
    except ImportError:
        raise InputError("[general] mode: fast needs the MQTT enactment (optlease.enact.mqtt), which this "
                         "installation does not have", cfg.path) from None
    from optlease.enact.mqtt_jobs import minimal_domain_xml

    return MqttEnactor.from_config(cfg, domain_xml=minimal_domain_xml)


FROM_AGENTS = "from-agents"


def site_from_agents(cfg: Config, enactor) -> Site:
    """`[simulation] resources: from-agents` (mode fast): node i is the i-th of `[mqtt] hosts`, sized by what its
    agent announces (CPU: 100 per vcpu, Memory: its MB); waits up to `[mqtt] hosts-wait` seconds for them all."""
    names = (cfg.get("mqtt", "hosts") or "").split()
    if cfg.get("general", "mode") != "fast" or not names:
        raise InputError("[simulation] resources: from-agents needs [general] mode: fast and [mqtt] hosts",
                         cfg.path)
    wait = float(cfg.get("mqtt", "hosts-wait"))
    deadline = time.monotonic() + wait
    while True:
        known = enactor.hosts()
        missing = [n for n in names if n not in known or not known[n].alive
                   or not {"vcpus", "memory_mb"} <= set(known[n].capacity)]
        if not missing or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    if missing:
        raise InputError(f"[simulation] resources: from-agents: no announcement from {' '.join(missing)} within "
                         f"{wait:g} s ([mqtt] hosts-wait); are their agents running on this broker? (a migfra never "
                         f"announces itself: with migfra hosts, give [simulation] resources)", cfg.path)
    nodes = tuple({"CPU": 100 * known[n].capacity["vcpus"], "Memory": known[n].capacity["memory_mb"]}
                  for n in names)
    return Site(("CPU", "Memory"), nodes)


def site_from_config(cfg: Config) -> Site:
    resources = cfg.get("simulation", "resources")
    if resources == FROM_AGENTS:
        raise InputError("[simulation] resources: from-agents is for the daemon in mode fast", cfg.path)
    if resources == "in-tracefile":
        # The site of an LWF file (its <site>), as in a simulation; the daemon takes no requests from it.
        from optlease.formats.traces import load_trace

        name = cfg.get("tracefile", "tracefile")
        if not name:
            raise InputError("[simulation] resources: in-tracefile needs [tracefile] tracefile (an LWF with a "
                             "<site>)", cfg.path)
        site = load_trace(cfg.resolve(name), origin=cfg.get("simulation", "starttime")).site
        if site is None:
            raise InputError(f"[simulation] resources is in-tracefile, but {name} has no <site>", cfg.path)
        return site
    if not resources:
        raise InputError("the daemon needs [simulation] resources as `<numnodes> CPU:<n> Memory:<n>`", cfg.path)
    from optlease.formats.site_source import site_from_resources
    return site_from_resources(resources, cfg.path, cfg.resolve)
