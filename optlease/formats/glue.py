"""GLUE 1.1 Cluster/SubCluster/Host descriptions read as optlease's site, from XML or from LDIF (GLUE 1.x LDAP).

XML: a `<Cluster>` (or a wrapper holding several) with `<SubCluster>`s, each with the GLUE attribute names as
elements (`PhysicalCPUs`, `LogicalCPUs`, `Architecture/SMPSize`, `MainMemory/RAMSize`, `OperatingSystem/Name`,
...) and optionally `<Host>`s that inherit what the subcluster says and may say more. LDIF: the entries with a
`GlueSubClusterUniqueID` (`GlueSubClusterPhysicalCPUs`, `GlueHostArchitectureSMPSize`,
`GlueHostMainMemoryRAMSize`, ...), as a BDII prints them; `GLUE_LDAP` maps one naming onto the other.

A subcluster without hosts has PhysicalCPUs / SMPSize nodes (SMPSize: the CPUs of one SMP node); each node has
100 CPU for each of its CPUs (LogicalCPUs shared out over the nodes when given, else SMPSize), RAMSize MB of
Memory and VirtualSize MB of Swap. A `<Host>` is one node. Everything else is kept in `Site.details`.
"""
from __future__ import annotations

import base64
from pathlib import Path

from lxml import etree

from optlease.domain.site import MAX_CAPACITY, MAX_NODES, Site, SiteError
from optlease.errors import InputError
from optlease.formats.lwf import read_bounded, xml_root
from optlease.numbers import parse_whole

MAX_BYTES = 16 * 2**20
# XML path (GLUE's own names) -> GLUE 1.x LDAP attribute
GLUE_LDAP = {
    "Name": "GlueSubClusterName", "UniqueID": "GlueSubClusterUniqueID",
    "PhysicalCPUs": "GlueSubClusterPhysicalCPUs", "LogicalCPUs": "GlueSubClusterLogicalCPUs",
    "Architecture/PlatformType": "GlueHostArchitecturePlatformType",
    "Architecture/SMPSize": "GlueHostArchitectureSMPSize",
    "MainMemory/RAMSize": "GlueHostMainMemoryRAMSize", "MainMemory/VirtualSize": "GlueHostMainMemoryVirtualSize",
    "OperatingSystem/Name": "GlueHostOperatingSystemName",
    "OperatingSystem/Release": "GlueHostOperatingSystemRelease",
    "OperatingSystem/Version": "GlueHostOperatingSystemVersion",
    "Processor/Vendor": "GlueHostProcessorVendor", "Processor/Model": "GlueHostProcessorModel",
    "Processor/ClockSpeed": "GlueHostProcessorClockSpeed",
    "ApplicationSoftware/RunTimeEnvironment": "GlueHostApplicationSoftwareRunTimeEnvironment",
}
_COUNTS = ("PhysicalCPUs", "LogicalCPUs", "Architecture/SMPSize", "MainMemory/RAMSize", "MainMemory/VirtualSize")


class _Group:
    """One subcluster or host: its attributes (XML path -> text) and where it was read."""

    def __init__(self, attrs: dict[str, str], where: str, hosts: list["_Group"] | None = None) -> None:
        self.attrs = attrs
        self.where = where
        self.hosts = hosts or []

    def count(self, key: str, required: bool = False, low: int = 1) -> int | None:
        raw = self.attrs.get(key)
        if raw is None:
            if required:
                raise SiteError(f"{self.what()} has no {key}", self.where)
            return None
        try:
            return parse_whole(raw, low, MAX_CAPACITY)
        except ValueError:
            raise SiteError(f"{self.what()}: {key} {raw[:30]!r} is not a whole number from {low} to "
                            f"{MAX_CAPACITY}", self.where) from None

    def what(self) -> str:
        return f"{'host' if 'host' in self.attrs else 'subcluster'} {self.attrs.get('Name', '')!r}".replace(" ''", "")

    def nodes(self) -> list[tuple[dict[str, int], dict]]:
        """(capacity, details) for each node of this group."""
        memory = self.count("MainMemory/RAMSize", required=True)
        swap = self.count("MainMemory/VirtualSize", low=0)
        logical = self.count("LogicalCPUs")
        smp = self.count("Architecture/SMPSize")
        if "host" in self.attrs:
            numnodes, cpus = 1, logical or smp or self.count("PhysicalCPUs", required=True)
        else:
            physical = self.count("PhysicalCPUs", required=True)
            if smp is None:
                raise SiteError(f"{self.what()} has PhysicalCPUs but no Architecture/SMPSize (CPUs per node)",
                                self.where)
            if physical % smp:
                raise SiteError(f"{self.what()}: PhysicalCPUs {physical} is not a whole number of SMPSize "
                                f"{smp} nodes", self.where)
            numnodes = physical // smp
            if logical is not None and logical % numnodes:
                raise SiteError(f"{self.what()}: LogicalCPUs {logical} does not share out over {numnodes} nodes",
                                self.where)
            cpus = logical // numnodes if logical is not None else smp
        if numnodes > MAX_NODES or cpus * 100 > MAX_CAPACITY:
            raise SiteError(f"{self.what()} is larger than optlease plans for", self.where)
        capacity = {"CPU": cpus * 100, "Memory": memory, **({"Swap": swap} if swap else {})}
        base = self.attrs.get("Name") or self.attrs.get("UniqueID") or "node"
        names = [base] if numnodes == 1 else [f"{base}-{i}" for i in range(1, numnodes + 1)]
        keep = {k: v for k, v in self.attrs.items() if k not in _COUNTS and k not in ("Name", "host")}
        return [(dict(capacity), {"name": name, **keep}) for name in names]


def _xml_groups(root: etree._Element, path: str) -> list[_Group]:
    def attrs(elem: etree._Element, inherited: dict[str, str]) -> dict[str, str]:
        out = dict(inherited)
        for child in elem:
            if not isinstance(child.tag, str) or child.tag in ("Host", "SubCluster"):
                continue
            leaves = [child] if not len(child) else list(child)
            for leaf in leaves:
                key = child.tag if leaf is child else f"{child.tag}/{leaf.tag}"
                if key not in GLUE_LDAP:
                    raise SiteError(f"<{leaf.tag}>: not a GLUE attribute optlease reads here "
                                    f"({', '.join(sorted(GLUE_LDAP))})", f"{path}:{leaf.sourceline}")
                out[key] = (leaf.text or "").strip()
        return out

    clusters = [root] if root.tag == "Cluster" else [el for el in root if el.tag == "Cluster"]
    if not clusters:
        raise SiteError(f"<{root.tag}>: holds no <Cluster>", f"{path}:{root.sourceline}")
    groups = []
    for cluster in clusters:
        for sub in cluster:
            if sub.tag in ("Name", "UniqueID", "InformationServiceURL") or not isinstance(sub.tag, str):
                continue
            where = f"{path}:{sub.sourceline}"
            if sub.tag == "Host":
                groups.append(_Group({**attrs(sub, {}), "host": "1"}, where))
            elif sub.tag == "SubCluster":
                own = attrs(sub, {})
                hosts = [_Group({**attrs(h, {k: v for k, v in own.items() if k not in ("Name", "UniqueID",
                                                                                        "PhysicalCPUs",
                                                                                        "LogicalCPUs")}),
                                 "host": "1"}, f"{path}:{h.sourceline}") for h in sub.findall("Host")]
                groups.append(_Group(own, where, hosts))
            else:
                raise SiteError(f"<{sub.tag}>: a <Cluster> holds SubCluster and Host elements", where)
    return groups


def parse_ldif(text: str, path: str) -> list[tuple[int, dict[str, list[str]]]]:
    """LDIF entries (RFC 2849, the subset a BDII prints): (line, attribute -> values); no change records."""
    entries: list[tuple[int, dict[str, list[str]]]] = []
    current: dict[str, list[str]] | None = None
    logical: list[tuple[int, str]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if line.startswith(" ") and logical:
            logical[-1] = (logical[-1][0], logical[-1][1] + line[1:])
        else:
            logical.append((number, line))
    for number, line in logical:
        if line.startswith("#"):
            continue
        if not line.strip():
            current = None
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or not all(c.isalnum() or c in "-;." for c in name):
            raise InputError(f"not an LDIF `attribute: value` line: {line[:60]!r}", f"{path}:{number}")
        if value.startswith(":"):
            try:
                value = base64.b64decode(value[1:].strip(), validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                raise InputError(f"{name}: bad base64 value", f"{path}:{number}") from None
        elif value.startswith("<"):
            raise InputError(f"{name}: values read from URLs (`:<`) are not accepted", f"{path}:{number}")
        else:
            value = value.strip()
        if current is None:
            if name.lower() == "version" and not entries:
                continue
            if name.lower() != "dn":
                raise InputError(f"an LDIF entry starts with dn:, not {name}:", f"{path}:{number}")
            current = {}
            entries.append((number, current))
        elif name.lower() in ("changetype", "dn"):
            raise InputError(f"{name}: only content records are read, not changes", f"{path}:{number}")
        current.setdefault(name, []).append(value)
    return entries


def _ldif_groups(text: str, path: str) -> list[_Group]:
    ldap_glue = {v.lower(): k for k, v in GLUE_LDAP.items()}
    groups = []
    for line, entry in parse_ldif(text, path):
        keys = {k.lower(): k for k in entry}
        if "gluesubclusteruniqueid" not in keys:
            continue
        attrs = {}
        for low, key in keys.items():
            if low in ldap_glue:
                values = entry[key]
                if len(values) > 1 and ldap_glue[low] in _COUNTS:
                    raise SiteError(f"{key} is given {len(values)} times", f"{path}:{line}")
                attrs[ldap_glue[low]] = ",".join(values)
        groups.append(_Group(attrs, f"{path}:{line}"))
    return groups


def parse_glue_site(data: bytes, path: str = "<glue>") -> Site:
    """The site a GLUE document describes (XML when it starts with `<`, LDIF otherwise)."""
    if len(data) > MAX_BYTES:
        raise InputError(f"a GLUE document of {len(data)} bytes is more than optlease reads ({MAX_BYTES})", path)
    if data.lstrip().startswith(b"<"):
        groups = _xml_groups(xml_root(data, path, "GLUE"), path)
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text (byte {exc.start})", path) from None
        groups = _ldif_groups(text, path)
    nodes: list[dict[str, int]] = []
    details: list[dict] = []
    for group in groups:
        members = group.hosts or [group]
        if group.hosts and group.count("PhysicalCPUs") is not None:
            given = sum(h.count("Architecture/SMPSize") or 0 for h in group.hosts)
            if given != group.count("PhysicalCPUs"):
                raise SiteError(f"{group.what()}: PhysicalCPUs {group.count('PhysicalCPUs')} conflicts with its "
                                f"hosts' SMPSize, {given} in all", group.where)
        for member in members:
            for capacity, info in member.nodes():
                nodes.append(capacity)
                details.append(info)
                if len(nodes) > MAX_NODES:
                    raise SiteError(f"the site has more than {MAX_NODES} nodes", member.where)
    if not nodes:
        raise InputError("no GLUE subcluster or host in the document", path)
    types = ("CPU", "Memory") + (("Swap",) if any("Swap" in n for n in nodes) else ())
    return Site(types, tuple(nodes), tuple(details))


def load_glue_site(path: str | Path) -> Site:
    return parse_glue_site(read_bounded(path, MAX_BYTES), str(path))
