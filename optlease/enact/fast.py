"""The FAST migfra wire protocol: task and result messages, their YAML framing, ids and topics.

The formats follow the real migration framework (fast-lib), not the older protocol notes: start vm carries
`vm-configurations`, stop/suspend/resume carry `list`, migrate and repin are flat, every result but `vm migrated` is a
`list` of per-VM entries, and whatever cannot be parsed is answered `result: unknown` without an id.
Nothing here touches the network or libvirt; the enactor and the agent both build on it. The framing, ids, topics
and field readers are in `fast_framing`; this module is what the rest of optlease reads the protocol through.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Union

# the protocol is read through this module: framing, ids and topics (fast_framing), tasks (here), results and agent
# status (fast_results)
from optlease.enact.fast_framing import (  # noqa: F401
    ALL_RESULTS, ALL_STATUS, EMPTY_CONTAINER, ERROR, MAX_PAYLOAD_BYTES, MIGRATION_TYPES, SUCCESS, U32, U64,
    VM_MIGRATED, VMS_LISTED, FastProtocolError, check_host, decode, encode, host_of_topic, new_task_id, read_entries,
    read_flag, read_id, read_indexed, read_name, read_uint, read_vcpu_map, result_topic, status_topic, task_topic)
from optlease.enact.fast_results import (  # noqa: F401
    AgentStatus, Result, VmResult, parse_result, parse_status, quit_result, unknown_result)

_XML_NAME = re.compile(r"<name>\s*([^<]+?)\s*</name>")
_REPEATED_GROUP = re.compile(r"(?<!\\)\)[*+{]")


# ------------------------------------------------------------------------------------------------------- tasks

@dataclass(frozen=True)
class VmConfig:
    """One entry of `vm-configurations`: a defined domain by name, or a domain XML to define; memory in KiB."""
    vm_name: str | None = None
    xml: str | None = None
    memory_kib: int | None = None
    vcpus: int | None = None
    transient: bool = False
    time_measurement: bool = False
    probe_with_ssh: bool | None = None    # migfra waits for SSH into the new domain unless this is false

    @property
    def name(self) -> str:
        """The name results carry: vm-name, else the <name> inside the XML (as migfra does), else ''."""
        if self.vm_name:
            return self.vm_name
        match = _XML_NAME.search(self.xml or "")
        return match.group(1) if match else ""

    def to_doc(self) -> dict[str, Any]:
        pairs = [("vm-name", self.vm_name), ("xml", self.xml), ("memory", self.memory_kib), ("vcpus", self.vcpus),
                 ("transient", self.transient or None), ("time-measurement", self.time_measurement or None),
                 ("probe-with-ssh", self.probe_with_ssh)]
        return {k: v for k, v in pairs if v is not None}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "VmConfig":
        xml = doc.get("xml")
        if xml is not None and not isinstance(xml, str):
            raise FastProtocolError(f"xml: expected a string, got {type(xml).__name__}")
        # migfra's start entries also accept `name:` for `vm-name`
        name = read_name(doc, "vm-name", required=False) or read_name(doc, "name", required=False)
        config = cls(vm_name=name, xml=xml,
                     memory_kib=read_uint(doc, "memory", U64, " of KiB"), vcpus=read_uint(doc, "vcpus", U32),
                     transient=read_flag(doc, "transient"), time_measurement=read_flag(doc, "time-measurement"),
                     probe_with_ssh=read_flag(doc, "probe-with-ssh") if "probe-with-ssh" in doc else None)
        if config.vm_name is None and config.xml is None:
            raise FastProtocolError("vm-configurations entry needs vm-name or xml")
        return config


@dataclass(frozen=True)
class StopEntry:
    """One entry of a stop vm `list`: destroy instead of shutdown when forced, then undefine if asked. Instead of
    a vm-name, migfra takes a `regex`: every running domain whose whole name matches."""
    vm_name: str | None
    force: bool = False
    undefine: bool = False
    regex: str | None = None

    def to_doc(self) -> dict[str, Any]:
        name = {"vm-name": self.vm_name} if self.regex is None else {"regex": self.regex}
        return {**name, "force": self.force, "undefine": self.undefine}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "StopEntry":
        regex = doc.get("regex")
        if regex is not None:
            if not isinstance(regex, str) or len(regex) > 256:
                raise FastProtocolError("regex: expected a pattern of at most 256 characters")
            if _REPEATED_GROUP.search(regex):
                # `(a+)+` takes exponential time on a long name: a sender could stall a worker for hours
                raise FastProtocolError("regex: a repeated group is not accepted")
            try:
                re.compile(regex)
            except re.error as exc:
                raise FastProtocolError(f"regex: {exc}") from None
        return cls(read_name(doc, "vm-name", required=False), read_flag(doc, "force"), read_flag(doc, "undefine"),
                   regex)


@dataclass(frozen=True)
class SwapWith:
    """The VM on the destination that a swapping migration moves back to the source."""
    vm_name: str
    pscom_hook_procs: int | None = None
    vcpu_map: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True)
class StartVm:
    kind: ClassVar[str] = "start vm"
    result_kind: ClassVar[str] = "vm started"
    configs: tuple[VmConfig, ...]
    id: str | None = field(default_factory=new_task_id)

    def body(self) -> dict[str, Any]:
        return {"vm-configurations": [c.to_doc() for c in self.configs]}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], task_id: str | None) -> "StartVm":
        entries = read_entries(doc, "vm-configurations")
        return cls(tuple(read_indexed(VmConfig.from_doc, entries, "vm-configurations")), task_id)


@dataclass(frozen=True)
class StopVm:
    kind: ClassVar[str] = "stop vm"
    result_kind: ClassVar[str] = "vm stopped"
    entries: tuple[StopEntry, ...]
    id: str | None = field(default_factory=new_task_id)

    def body(self) -> dict[str, Any]:
        return {"list": [e.to_doc() for e in self.entries]}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], task_id: str | None) -> "StopVm":
        # A nameless entry is not a parse error: migfra answers it `status: error` for that VM alone.
        entries = read_indexed(StopEntry.from_doc, read_entries(doc, "list"), "list")
        return cls(tuple(entries), task_id)


@dataclass(frozen=True)
class _NamedVms:
    """A task whose `list` only names VMs: suspend vm and resume vm."""
    kind: ClassVar[str] = ""
    result_kind: ClassVar[str] = ""
    vm_names: tuple[str, ...]
    id: str | None = field(default_factory=new_task_id)

    def body(self) -> dict[str, Any]:
        return {"list": [{"vm-name": n} for n in self.vm_names]}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], task_id: str | None) -> "_NamedVms":
        return cls(tuple(read_indexed(lambda e: read_name(e, "vm-name"), read_entries(doc, "list"), "list")), task_id)


@dataclass(frozen=True)
class SuspendVm(_NamedVms):
    kind: ClassVar[str] = "suspend vm"
    result_kind: ClassVar[str] = "vm suspended"


@dataclass(frozen=True)
class ResumeVm(_NamedVms):
    kind: ClassVar[str] = "resume vm"
    result_kind: ClassVar[str] = "vm resumed"


@dataclass(frozen=True)
class MigrateVm:
    kind: ClassVar[str] = "migrate vm"
    result_kind: ClassVar[str] = VM_MIGRATED
    vm_name: str
    destination: str
    migration_type: str = "warm"   # migfra's default when `parameter` names none
    rdma: bool = False
    pscom_hook_procs: int | None = None
    vcpu_map: tuple[tuple[int, ...], ...] | None = None
    swap_with: SwapWith | None = None
    time_measurement: bool = False
    id: str | None = field(default_factory=new_task_id)

    def body(self) -> dict[str, Any]:
        parameter: dict[str, Any] = {"migration-type": self.migration_type, "rdma-migration": self.rdma}
        if self.pscom_hook_procs is not None:
            parameter["pscom-hook-procs"] = self.pscom_hook_procs
        if self.vcpu_map is not None:
            parameter["vcpu-map"] = [list(c) for c in self.vcpu_map]
        if self.swap_with is not None:
            swap: dict[str, Any] = {"vm-name": self.swap_with.vm_name}
            if self.swap_with.pscom_hook_procs is not None:
                swap["pscom-hook-procs"] = self.swap_with.pscom_hook_procs
            if self.swap_with.vcpu_map is not None:
                swap["vcpu-map"] = [list(c) for c in self.swap_with.vcpu_map]
            parameter["swap-with"] = swap
        doc: dict[str, Any] = {"vm-name": self.vm_name, "destination": self.destination}
        if self.time_measurement:
            doc["time-measurement"] = True
        doc["parameter"] = parameter
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], task_id: str | None) -> "MigrateVm":
        parameter = doc.get("parameter") or {}
        if not isinstance(parameter, dict):
            raise FastProtocolError(f"parameter: expected a mapping, got {type(parameter).__name__}")
        kind = parameter.get("migration-type", "warm")
        if kind not in MIGRATION_TYPES:
            raise FastProtocolError(f"parameter.migration-type: expected live, warm or offline, got {kind!r:.40}")
        swap = parameter.get("swap-with")
        if swap is not None:
            if not isinstance(swap, dict):
                raise FastProtocolError("parameter.swap-with: expected a mapping with vm-name")
            swap = SwapWith(read_name(swap, "vm-name"), read_uint(swap, "pscom-hook-procs", U32), read_vcpu_map(swap))
        return cls(vm_name=read_name(doc, "vm-name"), destination=check_host(read_name(doc, "destination")),
                   migration_type=kind, rdma=read_flag(parameter, "rdma-migration"),
                   pscom_hook_procs=read_uint(parameter, "pscom-hook-procs", U32), vcpu_map=read_vcpu_map(parameter),
                   swap_with=swap, time_measurement=read_flag(doc, "time-measurement"), id=task_id)


@dataclass(frozen=True)
class RepinVm:
    kind: ClassVar[str] = "repin vm"
    result_kind: ClassVar[str] = "vm repinned"
    vm_name: str
    vcpu_map: tuple[tuple[int, ...], ...]
    id: str | None = field(default_factory=new_task_id)

    def body(self) -> dict[str, Any]:
        return {"vm-name": self.vm_name, "vcpu-map": [list(c) for c in self.vcpu_map]}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], task_id: str | None) -> "RepinVm":
        vcpu_map = read_vcpu_map(doc)
        if vcpu_map is None:
            raise FastProtocolError("missing vcpu-map")
        return cls(read_name(doc, "vm-name"), vcpu_map, task_id)


@dataclass(frozen=True)
class EvacuateNode:
    """migfra's `evacuate node`: migrate every running domain of the host to `destinations` (flat, like migrate;
    `parameter` carries `mode`: auto | compact | scatter, `migration-type`, `rdma-migration`). Answered
    `result: node evacuated` with one entry per domain."""
    kind: ClassVar[str] = "evacuate node"
    result_kind: ClassVar[str] = "node evacuated"
    destinations: tuple[str, ...]
    mode: str = "auto"
    migration_type: str = "warm"
    id: str | None = field(default_factory=new_task_id)

    def body(self) -> dict[str, Any]:
        return {"destinations": list(self.destinations),
                "parameter": {"mode": self.mode, "migration-type": self.migration_type}}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], task_id: str | None) -> "EvacuateNode":
        destinations = doc.get("destinations")
        if not isinstance(destinations, list) or not destinations or len(destinations) > 1024:
            raise FastProtocolError("destinations: expected a list of 1 to 1024 host names")
        hosts = tuple(check_host(str(d)) if isinstance(d, (str, int)) and not isinstance(d, bool) else
                      check_host("") for d in destinations)
        parameter = doc.get("parameter") or {}
        if not isinstance(parameter, dict):
            raise FastProtocolError(f"parameter: expected a mapping, got {type(parameter).__name__}")
        mode = parameter.get("mode", "auto")
        if mode not in ("auto", "compact", "scatter"):
            raise FastProtocolError(f"parameter.mode: expected auto, compact or scatter, got {mode!r:.40}")
        kind = parameter.get("migration-type", "warm")
        if kind not in MIGRATION_TYPES:
            raise FastProtocolError(f"parameter.migration-type: expected live, warm or offline, got {kind!r:.40}")
        return cls(hosts, mode, kind, task_id)


@dataclass(frozen=True)
class Quit:
    kind: ClassVar[str] = "quit"
    result_kind: ClassVar[str] = "quit"
    id: str | None = field(default_factory=new_task_id)

    def body(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], task_id: str | None) -> "Quit":
        return cls(task_id)


@dataclass(frozen=True)
class ListVms:
    """optlease extension (FAST has no such task): the agent answers `result: vms listed` with one entry per domain
    it knows, `vm-name`, `status: success` and `state` (libvirt's name: running, paused, shut off...)."""
    kind: ClassVar[str] = "list vms"
    result_kind: ClassVar[str] = VMS_LISTED
    id: str | None = field(default_factory=new_task_id)

    def body(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], task_id: str | None) -> "ListVms":
        return cls(task_id)


Task = Union[StartVm, StopVm, SuspendVm, ResumeVm, MigrateVm, RepinVm, EvacuateNode, Quit, ListVms]
TASK_KINDS: dict[str, type] = {cls.kind: cls for cls in (StartVm, StopVm, SuspendVm, ResumeVm, MigrateVm,
                                                          RepinVm, EvacuateNode, Quit, ListVms)}


def task_doc(task: Task, host: str | None = None) -> dict[str, Any]:
    """The message document of a task: `task` first, like migfra writes it, `id` last."""
    doc: dict[str, Any] = {}
    if host is not None:
        doc["host"] = host
    doc["task"] = task.kind
    doc.update(task.body())
    if task.id is not None:
        doc["id"] = task.id
    return doc


def encode_task(task: Task, host: str | None = None) -> bytes:
    return encode(task_doc(task, host))


def parse_task(payload: bytes | str) -> Task:
    """The task a payload asks for. Raises FastProtocolError naming the problem; its task_id is set only for an
    empty task container, which migfra answers with the id."""
    doc = decode(payload)
    if "task" not in doc:
        raise FastProtocolError('Cannot find key "task" to load Task from YAML.')
    kind = doc["task"]
    cls = TASK_KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise FastProtocolError(f"Unknown type of Task while loading: {kind!r:.60}")
    task_id = read_id(doc)
    try:
        task = cls.from_doc(doc, task_id)
    except FastProtocolError as exc:
        raise FastProtocolError(f"{kind}: {exc.message}") from None
    empty = (isinstance(task, StartVm) and not task.configs or isinstance(task, StopVm) and not task.entries
             or isinstance(task, _NamedVms) and not task.vm_names)
    if empty:
        raise FastProtocolError(EMPTY_CONTAINER, task_id=task_id)
    return task
