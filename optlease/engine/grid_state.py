"""What the daemon publishes to grid tools, gathered under the manager's lock: its hosts as SSS node objects
(capacity, what the plan holds on each now, up or down)."""
from __future__ import annotations

from optlease.formats.sss_write import HostState


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
