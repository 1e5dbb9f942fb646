"""The optlease agent: a migfra-compatible migration framework for one host, over MQTT and libvirt.

It subscribes (QoS 2) to `fast/migfra/<host>/task`, runs start / stop / suspend / resume / repin / migrate vm on its
libvirt connection in worker threads and publishes migfra's results (QoS 1) on `fast/migfra/<host>/result`; anything
it cannot parse is answered `result: unknown`; `task: quit` answers `result: quit` and ends it. On every connect it
announces itself with `task: init` and its capacity on `fast/agent/<host>/status`.

Migration. Real migfra hands a domain from libvirtd to libvirtd; with `--migrate-uri` (e.g. `qemu+ssh://{host}/system`)
the agent does the same (peer to peer, persistent on the destination, undefined on the source). Without it, and
always for libvirt's test driver, whose in-memory hosts cannot reach each other, the domain travels over the broker:
the source agent offers it on `fast/migfra/<destination>/handoff` (its XML, its state, for warm its saved image) and
waits for the destination agent's answer on `fast/migfra/<source>/handoff/result`:
  - offline (cold): the domain must be shut off; it is defined on the destination, then undefined on the source.
  - warm: the source saves the domain (virDomainSave: it stops there) and sends the image; the destination restores
    it (running, or paused if it was); then the source undefines it. A failed handoff restores it on the source.
  - live: the domain keeps running on the source until the destination has defined and started it (paused if it
    was paused), then the source destroys and undefines it. Memory contents are not carried: this is an emulation.
The destination refuses a name it already knows, and a source that hears nothing within the handoff timeout answers
`status: error` and keeps (or restores) the domain. Note that every `test:///default` connection in one process is
the same in-memory host; agents sharing a process need their own `test:///<path>.xml` node files to be separate hosts,
while agents in separate processes can each use `test:///default`.
"""
from optlease.enact.agent.agent import Agent
from optlease.enact.agent.broker import Broker, BrokerError, parse_address
from optlease.enact.agent.hypervisor import Hypervisor, HypervisorError
from optlease.enact.agent.run import AgentError, run_agent

__all__ = ["Agent", "AgentError", "Broker", "BrokerError", "Hypervisor", "HypervisorError", "parse_address",
           "run_agent"]
