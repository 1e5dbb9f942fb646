"""What optlease publishes to grid tools, read off the scheduler at one instant: its hosts as SSS node objects
(capacity, what the plan holds on each now, up or down) and its state as a GLUE Computing Element (jobs, free CPUs,
response times from the plan). Pure reads: nothing here changes the scheduler."""
from __future__ import annotations

import math
from importlib.metadata import PackageNotFoundError, version

from optlease.domain.lease import LeaseKind, LeaseState as S
from optlease.formats.glue_ce import CEState
from optlease.formats.sss_write import HostState

# A lease's state as a GLUE job status (SUBMITTED, WAITING, READY, SCHEDULED, RUNNING, ABORTED, DONE, CLEARED,
# CHECKPOINTED): a suspended lease has its memory image saved, GLUE's checkpoint.
JOB_STATUS = {S.PENDING: "SUBMITTED", S.QUEUED: "WAITING", S.SCHEDULED: "SCHEDULED", S.ACTIVE: "RUNNING",
              S.SUSPENDING: "RUNNING", S.MIGRATING: "RUNNING", S.RESUMING: "RUNNING",
              S.SUSPENDED_PENDING: "CHECKPOINTED", S.SUSPENDED_QUEUED: "CHECKPOINTED",
              S.SUSPENDED_SCHEDULED: "CHECKPOINTED"}
# The lease a response time is estimated for: one VM of one core, for an hour (a typical short grid job).
PROBE_SECONDS = 3600


def host_states(m) -> list[HostState]:
    """Each node of the manager's site as published now; call with `m.lock` held."""
    now = m.now()
    table = m.sched.table
    infos = m.enactor.hosts()
    out = []
    for i in m.site.node_ids:
        name = m.host(i)
        cap = dict(m.site.capacity(i))
        used = dict(zip(table.types, table.profiles[i].at(now)))
        info = infos.get(name)
        details = m.site.details[i - 1] if len(m.site.details) >= i else {}
        out.append(HostState(name, cap, {t: used.get(t, 0) for t in cap},
                             online=(info is None or bool(info.alive)) and i not in table.down, details=details))
    return out


def optlease_version() -> str:
    try:
        return version("optlease")
    except PackageNotFoundError:
        return "unknown"


def ce_state(sched, now: int, host: str, port: int, accepting: bool = True) -> CEState:
    """The CE at `now`: running = leases whose VMs run (Active, or being suspended, migrated or resumed), waiting
    = every other lease in the system (GLUE: "a state different than running"), free CPUs = whole free cores per
    node; estimated response = when a new 1-core lease would find room in the plan; worst = the latest planned
    start of a lease still waiting to start (at least the estimate). Status (GLUE's four): Production, Queueing
    when no host is up to serve leases, Draining when no lease is accepted any more (the daemon is stopping),
    Closed when both."""
    table = sched.table
    leases = sorted(sched.leases.values(), key=lambda lease: lease.id)
    jobs = [(lease.id, JOB_STATUS.get(lease.state, "SUBMITTED")) for lease in leases]
    running = sum(status == "RUNNING" for _, status in jobs)
    cpu = table.cpu
    up = [n for n in table.nodes if n not in table.down]
    free = sum(table.free_at(n, now)[cpu] // 100 for n in up)
    total = sum(table.caps[n][cpu] for n in table.caps) // 100
    estimated = _probe_start(table, up, now)
    planned = [rr.start for lease in leases if lease.state is S.SCHEDULED and lease.kind is LeaseKind.BEST_EFFORT
               for rr in lease.vmrrs[:1] if rr.start > now]
    # Queued leases hold no booking. Without backfilling a new lease starts after them (first come, first served):
    # none of them starts before the site as a whole has room for it, so neither does the new one.
    if sched.opts.backfilling == "off":
        for lease in sched.queue:
            estimated = max(estimated, table.earliest_total_room(now, lease.remaining(), lease.total_demand))
    worst = max([estimated] + planned)
    status = {(True, True): "Production", (True, False): "Queueing", (False, True): "Draining",
              (False, False): "Closed"}[(accepting, bool(up))]
    return CEState(host, port, optlease_version(), total, running, len(jobs) - running, free,
                   _seconds(estimated, now), _seconds(worst, now), status, jobs=jobs)


def _probe_start(table, nodes: list[int], now: int) -> float:
    """The earliest start of one 1-core VM (the smallest memory per core among the nodes) on any node."""
    mem = table.types.index("Memory")
    cpu = table.cpu
    per_core = [table.caps[n][mem] * 100 // table.caps[n][cpu] for n in nodes if table.caps[n][cpu]]
    if not per_core:
        return math.inf
    need = [0] * len(table.types)
    need[cpu], need[mem] = 100, min(per_core)
    return min(table.profiles[n].earliest_room(now, PROBE_SECONDS, tuple(need), table.caps[n]) for n in nodes)


def _seconds(start: float, now: int) -> int:
    # GLUE has no "never": a start no plan reaches is published as the largest 32-bit LDAP integer
    return 2**31 - 1 if math.isinf(start) else int(start - now)


def ce_in_simulation(cfg, at: int, host: str = "localhost", port: int = 0):
    """(CE state, site) of the configuration's simulation as its plan stood at `at` seconds after its start: the
    state after the last step at or before `at`, with the response times counted from `at`."""
    from optlease.engine.run import simulate

    seen: list[CEState] = []

    def observe(now: int, sched) -> None:
        if now <= at:
            seen[:] = [ce_state(sched, at, host, port)]

    result = simulate(cfg, observe=observe)
    if not seen:
        raise ValueError("the simulation took no step at or before the chosen instant")
    return seen[0], result.site
