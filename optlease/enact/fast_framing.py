"""The FAST migfra wire protocol's framing: the YAML encoding of messages (with a bound on what is parsed), task ids,
MQTT topics, and the field readers that tasks and results share. Nothing here touches the network or libvirt."""
from __future__ import annotations

import uuid
from typing import Any, Mapping

import yaml

from optlease.errors import InputError

# A task or result is a few KiB of YAML (a `vms listed` of 1,000 domains is ~80 KiB): the bounds keep a hostile
# sender from making us build megabytes of objects. Nodes are what costs CPU (the constructor is Python), so they are
# bounded too: 3 MB of YAML is ~3 s of CPU, while 20,000 nodes are a few tens of milliseconds.
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_NODES = 20_000
_BINARY = "tag:yaml.org,2002:binary"
MIGRATION_TYPES = ("live", "warm", "offline")
SUCCESS, ERROR = "success", "error"
ALL_RESULTS = "fast/migfra/+/result"
ALL_STATUS = "fast/agent/+/status"
EMPTY_CONTAINER = "Empty task container executed."
VM_MIGRATED, VMS_LISTED = "vm migrated", "vms listed"   # the result kinds read differently
U32, U64 = 2**32 - 1, 2**64 - 1


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


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Doc(dict):
    """A message's mapping, and the text of its top-level `id` as written (`yes` stays `yes`, not True)."""
    raw_id: str | None = None


def _check_events(text: str, max_nodes: int, binary: bool) -> str | None:
    """Refuse what FAST never writes before anything is built: aliases and anchors (an alias bomb of 500 bytes
    expands to 10^8 leaves), explicit tags (but !!binary where asked), and more than `max_nodes` nodes. The event
    scan runs in libyaml, so a refusal costs little. Returns the text of the top-level `id` scalar."""
    nodes = 0
    raw_id = None
    open_: list[list] = []       # per open collection: [is a mapping, a key comes next, the last key]
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.CollectionEndEvent):
            open_.pop()
            continue
        if isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)) and open_ and open_[-1][0]:
            parent = open_[-1]
            if parent[1]:
                parent[2] = event.value if isinstance(event, yaml.ScalarEvent) else None
            elif len(open_) == 1 and parent[2] == "id" and isinstance(event, yaml.ScalarEvent):
                raw_id = event.value
            parent[1] = not parent[1]
        if isinstance(event, yaml.CollectionStartEvent):
            open_.append([isinstance(event, yaml.MappingStartEvent), True, None])
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise FastProtocolError(f"YAML anchors and aliases are not accepted{_where(event)}")
        if isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
            nodes += 1
            if nodes > max_nodes:
                raise FastProtocolError(f"too many YAML nodes (more than {max_nodes})")
            tag = event.tag      # None unless written: `!` is a quoted scalar's non-specific tag
            if tag not in (None, "!") and not (binary and tag == _BINARY):
                raise FastProtocolError(f"YAML tag {tag[:40]!r} is not accepted{_where(event)}")
    return raw_id


def _where(event) -> str:
    mark = event.start_mark
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def decode(payload: bytes | str, max_bytes: int = MAX_PAYLOAD_BYTES, max_nodes: int = MAX_NODES,
           binary: bool = False) -> dict[str, Any]:
    """The one mapping a payload holds, read with safe loading only, no aliases, no tags (`binary`: but !!binary),
    at most `max_bytes` and `max_nodes`. The trailing `---` of migfra's framing opens an empty second document,
    which is dropped."""
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
        raw_id = _check_events(payload, max_nodes, binary)
        docs = [d for d in yaml.load_all(payload, Loader=_Loader) if d is not None]
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
    doc = _Doc(docs[0])
    doc.raw_id = raw_id
    return doc


# ----------------------------------------------------------------------------------------------- field readers
# Each reader names the key in its message; yaml-cpp reads scalars by the type asked for, so digits are accepted
# for names and digit strings for counts, but a boolean is never a name and `lots` is never a size.

def read_id(doc: Mapping[str, Any]) -> str | None:
    """The id as it was written: migfra echoes ids unquoted, so `yes` or `042` must stay text, not become a
    boolean or a number."""
    value = doc.get("id")
    if value is None:
        return None
    raw = getattr(doc, "raw_id", None)
    if raw is not None and isinstance(value, (bool, int, float)):
        return raw
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise FastProtocolError(f"id: expected a scalar, got {type(value).__name__}")


def read_name(doc: Mapping[str, Any], key: str, required: bool = True) -> str | None:
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


def read_uint(doc: Mapping[str, Any], key: str, limit: int, unit: str = "") -> int | None:
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


def read_flag(doc: Mapping[str, Any], key: str) -> bool:
    value = doc.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise FastProtocolError(f"{key}: expected true or false, got {value!r:.60}")
    return value


def read_entries(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = doc.get(key)
    if value is None:
        raise FastProtocolError(f"missing {key}")
    if not isinstance(value, list):
        raise FastProtocolError(f"{key}: expected a list, got {type(value).__name__}")
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise FastProtocolError(f"{key}[{i}]: expected a mapping, got {type(entry).__name__}")
    return value


def read_vcpu_map(doc: Mapping[str, Any], key: str = "vcpu-map") -> tuple[tuple[int, ...], ...] | None:
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


def read_indexed(read, entries: list, key: str) -> list:
    """Read every entry, naming the one that fails by its index."""
    out = []
    for i, entry in enumerate(entries):
        try:
            out.append(read(entry))
        except FastProtocolError as exc:
            raise FastProtocolError(f"{key}[{i}]: {exc.message}") from None
    return out
