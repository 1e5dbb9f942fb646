"""Hosts written as SSS node objects (release 3.1.0): one `<Node>` per host inside SSSRMAP's `<Data>`.

Each node has its `Id`, `Name`, `State` (Idle, Busy or Offline), the features, extensions, Opsys, Arch and
Description its site description gave, and `Configured`, `Available` and `Utilized` consumables in the units
`optlease.formats.sss` reads back: Processors (100 CPU each; `<Resource name="CPU">` in CPU units when not a whole
number of cores), Memory/Disk/Swap in MB, Network in Mb/s, any other
resource type as `<Resource name= type=>`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from lxml import etree

from optlease.formats.sss import SITE_TYPE_OF

_UNITS = {"Memory": "MB", "Disk": "MB", "Swap": "MB", "Network": "Mb/s"}


@dataclass
class HostState:
    """One host as published: capacities in site units, and what the plan holds on it now."""

    name: str
    configured: dict[str, int]
    utilized: dict[str, int]
    online: bool = True
    details: dict = field(default_factory=dict)

    @property
    def available(self) -> dict[str, int]:
        if not self.online:
            return {rtype: 0 for rtype in self.configured}
        return {rtype: max(0, amount - self.utilized.get(rtype, 0)) for rtype, amount in self.configured.items()}


def _consumables(parent: etree._Element, tag: str, amounts: dict[str, int]) -> None:
    elem = etree.SubElement(parent, tag)
    for rtype, amount in amounts.items():
        sss_tag = SITE_TYPE_OF.get(rtype)
        if sss_tag == "Processors" and amount % 100:
            # SSS counts whole processors (Integer): a fraction of a core goes out in optlease's own CPU units
            etree.SubElement(elem, "Resource", name="CPU").text = str(amount)
        elif sss_tag == "Processors":
            etree.SubElement(elem, "Processors").text = str(amount // 100)
        elif sss_tag is not None:
            etree.SubElement(elem, sss_tag, units=_UNITS[sss_tag]).text = str(amount)
        else:
            name, _, kind = rtype.partition("/")
            attrs = {"name": name, **({"type": kind} if kind else {})}
            etree.SubElement(elem, "Resource", attrs).text = str(amount)


def host_node(host: HostState, node_id: int) -> etree._Element:
    node = etree.Element("Node")
    etree.SubElement(node, "Id").text = str(node_id)
    etree.SubElement(node, "Name").text = host.name
    busy = any(host.utilized.get(rtype, 0) for rtype in host.configured)
    etree.SubElement(node, "State").text = "Offline" if not host.online else "Busy" if busy else "Idle"
    details = host.details
    for feature in details.get("features", ()):
        etree.SubElement(node, "Feature").text = feature
    for tag in ("Opsys", "Arch", "Description"):
        if details.get(tag.lower()):
            etree.SubElement(node, tag).text = details[tag.lower()]
    for ext in details.get("extensions", ()):
        attrs = {"name": ext["name"], **({"type": ext["type"]} if ext.get("type") else {})}
        etree.SubElement(node, "Extension", attrs).text = ext.get("value", "")
    _consumables(node, "Configured", host.configured)
    _consumables(node, "Available", host.available)
    _consumables(node, "Utilized", {rtype: host.utilized.get(rtype, 0) for rtype in host.configured})
    return node


def write_sss(hosts: list[HostState]) -> str:
    data = etree.Element("Data")
    for i, host in enumerate(hosts, start=1):
        data.append(host_node(host, i))
    return etree.tostring(data, pretty_print=True, encoding="unicode")
