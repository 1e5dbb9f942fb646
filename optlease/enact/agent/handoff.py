"""The agent-to-agent handoff messages that carry a migrating domain from the source agent to the destination agent.

migfra's own migration is libvirt-to-libvirt; between hosts that only share the broker (libvirt's test driver, or
agents that cannot reach each other's libvirtd) the source agent offers the domain on
`fast/migfra/<destination>/handoff` and the destination answers on `fast/migfra/<source>/handoff/result`. These topics
sit beside migfra's `task` and `result`, so `fast/migfra/+/result` subscribers never see them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
import uuid

from optlease.enact.fast import ERROR, SUCCESS, FastProtocolError, MIGRATION_TYPES, check_host, decode, encode

# A warm handoff carries the saved memory image; test-driver images are a few KiB, but leave room for small real ones.
MAX_HANDOFF_BYTES = 256 * 1024 * 1024
STATES = ("running", "paused", "shut off")


def offer_topic(host: str) -> str:
    """Where an agent receives domains migrating to it."""
    return f"fast/migfra/{check_host(host)}/handoff"


def reply_topic(host: str) -> str:
    """Where an agent hears back about domains it offered."""
    return f"fast/migfra/{check_host(host)}/handoff/result"


@dataclass(frozen=True)
class Offer:
    """A domain offered to a destination: its XML, how it ran, and for a warm migration its saved image."""
    source: str
    vm_name: str
    migration_type: str
    xml: str
    state: str                       # running | paused | shut off, restored as such on the destination
    persistent: bool = True
    image: bytes | None = None       # warm only: what virDomainSave wrote on the source
    vcpu_map: tuple[tuple[int, ...], ...] | None = None
    id: str = field(default_factory=lambda: f"h-{uuid.uuid4().hex}")

    def encode(self) -> bytes:
        doc: dict[str, Any] = {"task": "receive vm", "id": self.id, "source": self.source, "vm-name": self.vm_name,
                               "migration-type": self.migration_type, "state": self.state,
                               "persistent": self.persistent, "xml": self.xml}
        if self.image is not None:
            doc["image"] = self.image          # dumped as !!binary, read back as bytes by safe_load
        if self.vcpu_map is not None:
            doc["vcpu-map"] = [list(c) for c in self.vcpu_map]
        return encode(doc)


@dataclass(frozen=True)
class Reply:
    """The destination's answer to an offer: success once the domain is there, error with libvirt's words."""
    id: str
    vm_name: str
    status: str
    details: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == SUCCESS

    def encode(self) -> bytes:
        doc: dict[str, Any] = {"result": "vm received", "id": self.id, "vm-name": self.vm_name, "status": self.status}
        if self.details:
            doc["details"] = self.details
        return encode(doc)


def _text(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise FastProtocolError(f"handoff: missing or bad {key}")
    return value


def parse_offer(payload: bytes) -> Offer:
    doc = decode(payload, max_bytes=MAX_HANDOFF_BYTES, binary=True)
    if doc.get("task") != "receive vm":
        raise FastProtocolError("handoff: expected task: receive vm")
    kind, state = doc.get("migration-type"), doc.get("state")
    if kind not in MIGRATION_TYPES:
        raise FastProtocolError(f"handoff: bad migration-type {kind!r:.40}")
    if state not in STATES:
        raise FastProtocolError(f"handoff: bad state {state!r:.40}")
    image = doc.get("image")
    if image is not None and not isinstance(image, bytes):
        raise FastProtocolError("handoff: image must be !!binary")
    raw_map = doc.get("vcpu-map")
    vcpu_map = None
    if raw_map is not None:
        if not isinstance(raw_map, list) or not all(isinstance(c, list) for c in raw_map):
            raise FastProtocolError("handoff: vcpu-map must be a list of CPU lists")
        vcpu_map = tuple(tuple(int(x) for x in c) for c in raw_map)
    return Offer(source=check_host(_text(doc, "source")), vm_name=_text(doc, "vm-name"), migration_type=kind,
                 xml=_text(doc, "xml"), state=state, persistent=doc.get("persistent") is not False, image=image,
                 vcpu_map=vcpu_map, id=_text(doc, "id"))


def parse_reply(payload: bytes) -> Reply:
    doc = decode(payload)
    status = doc.get("status")
    if status not in (SUCCESS, ERROR):
        raise FastProtocolError(f"handoff reply: bad status {status!r:.40}")
    details = doc.get("details")
    return Reply(_text(doc, "id"), str(doc.get("vm-name", "")), status, None if details is None else str(details))
