"""Running one agent as a process: open libvirt, connect, serve until `task: quit` or SIGTERM, leave cleanly."""
from __future__ import annotations

import signal
import threading

import libvirt

from optlease.enact.agent.agent import Agent
from optlease.enact.agent.broker import Broker
from optlease.enact.agent.hypervisor import Hypervisor, quiet_libvirt
from optlease.enact.agent.owned import OPTLEASE_NAMES


class AgentError(RuntimeError):
    """The agent cannot run (libvirt cannot be opened), said in one line."""


def run_agent(host: str, libvirt_uri: str, broker: Broker, *, handoff_timeout: float = 30.0,
              migrate_uri: str | None = None, heartbeat: float = 10.0, adopt: str | None = OPTLEASE_NAMES) -> int:
    """Serve tasks for `host` until told to quit. Raises AgentError or BrokerError when it cannot start."""
    quiet_libvirt()
    try:
        conn = libvirt.open(libvirt_uri)
    except libvirt.libvirtError as exc:
        raise AgentError(f"cannot open libvirt {libvirt_uri}: {exc}") from None
    try:
        agent = Agent(host, Hypervisor(conn), broker, handoff_timeout=handoff_timeout, migrate_uri=migrate_uri,
                      heartbeat=heartbeat, adopt=adopt)
        agent.start()
        previous = None
        if threading.current_thread() is threading.main_thread():
            # SIGTERM (systemd, kill) ends the agent like `task: quit`: tasks under way still answer
            previous = signal.signal(signal.SIGTERM, lambda _sig, _frame: agent.request_stop())
        try:
            agent.wait()
        finally:
            agent.stop()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
    finally:
        conn.close()
    return 0
