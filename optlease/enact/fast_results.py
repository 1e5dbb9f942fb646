"""The FAST migfra wire protocol's results (one entry per VM; `vm migrated` flat) and the agents' status messages."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from optlease.enact.fast_framing import (ERROR, SUCCESS, U32, U64, VM_MIGRATED, VMS_LISTED, FastProtocolError, decode,
                                         encode, read_entries, read_id, read_indexed, read_name, read_uint)


# ----------------------------------------------------------------------------------------------------- results

@dataclass(frozen=True)
class VmResult:
    """One VM's outcome in a result."""
    vm_name: str
    status: str
    details: str | None = None
    time_measurement: Mapping[str, float] | None = None
    state: str | None = None          # `vms listed` only (optlease extension): the domain's libvirt state

    @property
    def ok(self) -> bool:
        return self.status == SUCCESS

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"vm-name": self.vm_name, "status": self.status}
        if self.state is not None:
            doc["state"] = self.state
        if self.details:
            doc["details"] = self.details
        if self.time_measurement:
            doc["time-measurement"] = dict(self.time_measurement)
        return doc


@dataclass(frozen=True)
class Result:
    """A result message: its kind (`vm started`, ..., `unknown`, `quit`), the echoed id, one entry per VM."""
    kind: str
    vms: tuple[VmResult, ...]
    id: str | None = None

    @property
    def ok(self) -> bool:
        if self.kind == VMS_LISTED:     # a host with no domains lists nothing, and that is fine
            return all(v.ok for v in self.vms)
        return bool(self.vms) and all(v.ok for v in self.vms)

    @property
    def details(self) -> str:
        return "; ".join(v.details for v in self.vms if v.details)

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"result": self.kind}
        if self.id is not None:
            doc["id"] = self.id
        if self.kind == VM_MIGRATED and len(self.vms) == 1:
            doc.update(self.vms[0].to_doc())   # only vm migrated is flat
        else:
            doc["list"] = [v.to_doc() for v in self.vms]
        return doc

    def encode(self) -> bytes:
        return encode(self.to_doc())


def unknown_result(details: str, task_id: str | None = None) -> Result:
    """migfra's answer to a message it cannot parse."""
    return Result("unknown", (VmResult("unknown", ERROR, details),), task_id)


def quit_result(task_id: str | None) -> Result:
    return Result("quit", (VmResult("n/a", SUCCESS),), task_id)


def _vm_result(doc: Mapping[str, Any]) -> VmResult:
    status = doc.get("status")
    if status not in (SUCCESS, ERROR):
        raise FastProtocolError(f"status: expected success or error, got {status!r:.40}")
    details = doc.get("details")
    timing = doc.get("time-measurement")
    name = doc.get("vm-name")   # may be empty: a VM the task failed to name
    state = doc.get("state")
    return VmResult("" if name is None else str(name), status,
                    None if details is None else str(details), timing if isinstance(timing, dict) else None,
                    None if state is None else str(state)[:40])


def parse_result(payload: bytes | str) -> Result:
    """The result a payload reports; the id is read back as a string (compare ids as strings)."""
    doc = decode(payload)
    kind = doc.get("result")
    if not isinstance(kind, str) or not kind:
        raise FastProtocolError('Cannot find key "result" in result message')
    if "list" in doc:
        vms = tuple(read_indexed(_vm_result, read_entries(doc, "list"), "list"))
    elif "status" in doc:
        vms = (_vm_result(doc),)
    else:
        vms = ()
    return Result(kind, vms, read_id(doc))


# ------------------------------------------------------------------------------------------------ agent status

@dataclass(frozen=True)
class AgentStatus:
    """What an agent says on fast/agent/<host>/status: `init` when it comes up, with its capacity."""
    source: str
    task: str = "init"
    vcpus: int | None = None
    memory_kib: int | None = None

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"task": self.task, "source": self.source}
        if self.vcpus is not None:
            doc["vcpus"] = self.vcpus
        if self.memory_kib is not None:
            doc["memory"] = self.memory_kib
        return doc

    def encode(self) -> bytes:
        return encode(self.to_doc())


def parse_status(payload: bytes | str) -> AgentStatus:
    doc = decode(payload)
    task = doc.get("task")
    if not isinstance(task, str):
        raise FastProtocolError('Cannot find key "task" in agent status')
    return AgentStatus(read_name(doc, "source"), task, read_uint(doc, "vcpus", U32),
                       read_uint(doc, "memory", U64, " of KiB"))
