"""The FAST migfra wire protocol: task and result messages, their YAML framing, ids and topics.

The formats follow the real migration framework (fast-lib), not the older protocol notes: start vm carries
`vm-configurations`, stop/suspend/resume carry `list`, migrate and repin are flat, every result but `vm migrated` is a
`list` of per-VM entries, and whatever cannot be parsed is answered `result: unknown` without an id.
Nothing here touches the network or libvirt; the enactor and the agent both build on it.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Union

import yaml

from optlease.errors import InputError

# A task payload is a few KiB of YAML; a bound keeps a hostile sender from making us parse megabytes.
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
MIGRATION_TYPES = ("live", "warm", "offline")
SUCCESS, ERROR = "success", "error"
ALL_RESULTS = "fast/migfra/+/result"
ALL_STATUS = "fast/agent/+/status"
EMPTY_CONTAINER = "Empty task container executed."


class FastProtocolError(InputError):
    """A FAST message that cannot be read; `task_id` is set only when the id itself was readable and worth echoing."""

    def __init__(self, message: str, task_id: str | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id


# ---------------------------------------------------------------------------------------------------------- topics

def check_host(host: str) -> str:
    """The host name, if it can stand as one MQTT topic level."""
    if not isinstance(host, str) or not host or any(c in host for c in "/+#\0"):
        raise FastProtocolError(f"bad host name {host!r}: must be non-empty, without '/', '+', '#'")
    return host


def task_topic(host: str) -> str:
    return f"fast/migfra/{check_host(host)}/task"


def result_topic(host: str) -> str:
    return f"fast/migfra/{check_host(host)}/result"


def status_topic(host: str) -> str:
    return f"fast/agent/{check_host(host)}/status"


def host_of_topic(topic: str) -> str:
    """The <host> level of a fast/migfra/<host>/... or fast/agent/<host>/... topic."""
    parts = topic.split("/")
    if len(parts) < 4 or parts[0] != "fast" or parts[1] not in ("migfra", "agent"):
        raise FastProtocolError(f"not a FAST host topic: {topic!r}")
    return parts[2]


def new_task_id() -> str:
    """A fresh id. The `t-` prefix keeps it a string for every YAML loader: migfra echoes ids unquoted, and a bare
    `42` or `yes` would come back as an int or a boolean."""
    return f"t-{uuid.uuid4().hex}"


# ------------------------------------------------------------------------------------------------------- framing

class _Dumper(yaml.SafeDumper):
    """Safe dumper that writes multi-line strings (domain XML) as literal blocks, readable in a broker log."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def encode(doc: Mapping[str, Any]) -> bytes:
    """One message, framed exactly as migfra frames it: `---\\n<yaml>\\n---`."""
    body = yaml.dump(dict(doc), Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return ("---\n" + body + "---").encode("utf-8")


def decode(payload: bytes | str, max_bytes: int = MAX_PAYLOAD_BYTES) -> dict[str, Any]:
    """The one mapping a payload holds. Only safe_load_all: the trailing `---` of migfra's framing opens an empty
    second document, which is dropped."""
    if isinstance(payload, (bytes, bytearray)):
        if len(payload) > max_bytes:
            raise FastProtocolError(f"payload too large ({len(payload)} bytes, at most {max_bytes})")
        try:
            payload = bytes(payload).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FastProtocolError(f"payload is not UTF-8 text (byte {exc.start})") from None
    if len(payload) > max_bytes:
        raise FastProtocolError(f"payload too large ({len(payload)} characters, at most {max_bytes})")
    if not payload.strip():
        raise FastProtocolError("empty payload")
    try:
        docs = [d for d in yaml.safe_load_all(payload) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise FastProtocolError(f"bad YAML{where}: {problem}") from None
    except RecursionError:
        raise FastProtocolError("bad YAML: nested too deeply") from None
    if not docs:
        raise FastProtocolError("empty payload: no YAML document")
    if len(docs) > 1:
        raise FastProtocolError(f"expected one YAML document, got {len(docs)}")
    if not isinstance(docs[0], dict):
        raise FastProtocolError(f"expected a YAML mapping, got {type(docs[0]).__name__}")
    return docs[0]


# ----------------------------------------------------------------------------------------------- field readers
# Each reader names the key in its message; yaml-cpp reads scalars by the type asked for, so digits are accepted
# for names and digit strings for counts, but a boolean is never a name and `lots` is never a size.

def _id(doc: Mapping[str, Any]) -> str | None:
    value = doc.get("id")
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise FastProtocolError(f"id: expected a scalar, got {type(value).__name__}")


def _name(doc: Mapping[str, Any], key: str, required: bool = True) -> str | None:
    value = doc.get(key)
    if value is None:
        if required:
            raise FastProtocolError(f"missing {key}")
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise FastProtocolError(f"{key}: expected a name, got {value!r:.60}")
    text = str(value)
    if not text:
        raise FastProtocolError(f"{key}: empty name")
    return text


def _uint(doc: Mapping[str, Any], key: str, limit: int, unit: str = "") -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FastProtocolError(f"{key}: expected a whole number{unit}, got {value!r:.60}")
    if not 0 <= value <= limit:
        raise FastProtocolError(f"{key}: {value} is out of range 0..{limit}")
    return value


def _flag(doc: Mapping[str, Any], key: str) -> bool:
    value = doc.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise FastProtocolError(f"{key}: expected true or false, got {value!r:.60}")
    return value


def _entries(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = doc.get(key)
    if value is None:
        raise FastProtocolError(f"missing {key}")
    if not isinstance(value, list):
        raise FastProtocolError(f"{key}: expected a list, got {type(value).__name__}")
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise FastProtocolError(f"{key}[{i}]: expected a mapping, got {type(entry).__name__}")
    return value


def _vcpu_map(doc: Mapping[str, Any], key: str = "vcpu-map") -> tuple[tuple[int, ...], ...] | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(cpus, list) for cpus in value):
        raise FastProtocolError(f"{key}: expected a list of CPU lists, e.g. [[4], [5]]")
    out = []
    for cpus in value:
        if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 65536 for c in cpus):
            raise FastProtocolError(f"{key}: CPU numbers must be whole numbers in 0..65535, got {cpus!r:.60}")
        out.append(tuple(cpus))
    return tuple(out)


_U32, _U64 = 2**32 - 1, 2**64 - 1
_XML_NAME = re.compile(r"<name>\s*([^<]+?)\s*</name>")


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

    @property
    def name(self) -> str:
        """The name results carry: vm-name, else the <name> inside the XML (as migfra does), else ''."""
        if self.vm_name:
            return self.vm_name
        match = _XML_NAME.search(self.xml or "")
        return match.group(1) if match else ""

    def to_doc(self) -> dict[str, Any]:
        pairs = [("vm-name", self.vm_name), ("xml", self.xml), ("memory", self.memory_kib), ("vcpus", self.vcpus),
                 ("transient", self.transient or None), ("time-measurement", self.time_measurement or None)]
        return {k: v for k, v in pairs if v is not None}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "VmConfig":
        xml = doc.get("xml")
        if xml is not None and not isinstance(xml, str):
            raise FastProtocolError(f"xml: expected a string, got {type(xml).__name__}")
        config = cls(vm_name=_name(doc, "vm-name", required=False), xml=xml,
                     memory_kib=_uint(doc, "memory", _U64, " of KiB"), vcpus=_uint(doc, "vcpus", _U32),
                     transient=_flag(doc, "transient"), time_measurement=_flag(doc, "time-measurement"))
        if config.vm_name is None and config.xml is None:
            raise FastProtocolError("vm-configurations entry needs vm-name or xml")
        return config


@dataclass(frozen=True)
class StopEntry:
    """One entry of a stop vm `list`: destroy instead of shutdown when forced, then undefine if asked."""
    vm_name: str | None
    force: bool = False
    undefine: bool = False

    def to_doc(self) -> dict[str, Any]:
        return {"vm-name": self.vm_name, "force": self.force, "undefine": self.undefine}


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
        entries = _entries(doc, "vm-configurations")
        return cls(tuple(_indexed(VmConfig.from_doc, entries, "vm-configurations")), task_id)


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
        entries = _indexed(lambda e: StopEntry(_name(e, "vm-name", required=False), _flag(e, "force"),
                                               _flag(e, "undefine")), _entries(doc, "list"), "list")
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
        return cls(tuple(_indexed(lambda e: _name(e, "vm-name"), _entries(doc, "list"), "list")), task_id)


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
    result_kind: ClassVar[str] = "vm migrated"
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
            swap = SwapWith(_name(swap, "vm-name"), _uint(swap, "pscom-hook-procs", _U32), _vcpu_map(swap))
        return cls(vm_name=_name(doc, "vm-name"), destination=check_host(_name(doc, "destination")),
                   migration_type=kind, rdma=_flag(parameter, "rdma-migration"),
                   pscom_hook_procs=_uint(parameter, "pscom-hook-procs", _U32), vcpu_map=_vcpu_map(parameter),
                   swap_with=swap, time_measurement=_flag(doc, "time-measurement"), id=task_id)


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
        vcpu_map = _vcpu_map(doc)
        if vcpu_map is None:
            raise FastProtocolError("missing vcpu-map")
        return cls(_name(doc, "vm-name"), vcpu_map, task_id)


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
    result_kind: ClassVar[str] = "vms listed"
    id: str | None = field(default_factory=new_task_id)

    def body(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], task_id: str | None) -> "ListVms":
        return cls(task_id)


Task = Union[StartVm, StopVm, SuspendVm, ResumeVm, MigrateVm, RepinVm, Quit, ListVms]
TASK_KINDS: dict[str, type] = {cls.kind: cls for cls in (StartVm, StopVm, SuspendVm, ResumeVm, MigrateVm,
                                                          RepinVm, Quit, ListVms)}


def _indexed(read, entries: list, key: str) -> list:
    """Read every entry, naming the one that fails by its index."""
    out = []
    for i, entry in enumerate(entries):
        try:
            out.append(read(entry))
        except FastProtocolError as exc:
            raise FastProtocolError(f"{key}[{i}]: {exc.message}") from None
    return out


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
    task_id = _id(doc)
    try:
        task = cls.from_doc(doc, task_id)
    except FastProtocolError as exc:
        raise FastProtocolError(f"{kind}: {exc.message}") from None
    empty = (isinstance(task, StartVm) and not task.configs or isinstance(task, StopVm) and not task.entries
             or isinstance(task, _NamedVms) and not task.vm_names)
    if empty:
        raise FastProtocolError(EMPTY_CONTAINER, task_id=task_id)
    return task


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
        if self.kind == ListVms.result_kind:     # a host with no domains lists nothing, and that is fine
            return all(v.ok for v in self.vms)
        return bool(self.vms) and all(v.ok for v in self.vms)

    @property
    def details(self) -> str:
        return "; ".join(v.details for v in self.vms if v.details)

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"result": self.kind}
        if self.id is not None:
            doc["id"] = self.id
        if self.kind == MigrateVm.result_kind and len(self.vms) == 1:
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
        vms = tuple(_indexed(_vm_result, _entries(doc, "list"), "list"))
    elif "status" in doc:
        vms = (_vm_result(doc),)
    else:
        vms = ()
    return Result(kind, vms, _id(doc))


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
    return AgentStatus(_name(doc, "source"), task, _uint(doc, "vcpus", _U32), _uint(doc, "memory", _U64, " of KiB"))
