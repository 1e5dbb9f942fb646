"""SSS node objects (Scalable Systems Software node object, release 3.1.0) read as optlease's site.

A document is one `<Node>` or a wrapper (SSSRMAP's `<Data>`, or any other element) holding several. A node's
`Configured` consumables become its capacity in the site's units: one `Processors` is 100 CPU (Haizea's one core),
`Memory`, `Disk` and `Swap` are in MB (the spec's default unit; `units=` converts, binary multiples as its
Appendix A defines them), `Network` in Mb/s, and `<Resource name= type=>` is a resource type of its own
(`name/type`). Amounts convert down to whole site units: a node never offers more than it has.

`Id` names the node and `Name` too when given; either may be a range (`node[1-5,7]`) or, with
`aggregation="List"`, a list (`delimiter=`, a comma by default), and `count=` on `<Node>` repeats each named node;
every expanded node gets the same resources. A node whose `State` is Offline, Down or Unknown, or whose `<Online>`
is false, is left out of the site: nothing can be planned there. Features, extensions, Opsys, Arch, Description and
the Available amounts are kept in `Site.details`.

The parser resolves no entity, loads no DTD, touches no network; documents are bounded in size and node count.
Every error names the file, the line and the element.
"""
from __future__ import annotations

import re
from pathlib import Path

from optlease.domain.site import MAX_CAPACITY, MAX_NODES, Site, SiteError
from optlease.errors import InputError
from optlease.formats.lwf import read_bounded, xml_root
from optlease.numbers import parse_whole

MAX_BYTES = 16 * 2**20

# Appendix A: binary multiples of a byte, by the exponent of 2 (its joke units included: the spec lists them).
_BYTE_POWERS = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40, "p": 50, "e": 60, "z": 70, "y": 80}
_BYTE_WORDS = {"byte": 0, "kilobyte": 10, "megabyte": 20, "gigabyte": 30, "terabyte": 40, "petabyte": 50,
               "exabyte": 60, "zettabyte": 70, "aettabyte": 70, "yottabyte": 80, "nonabyte": 90, "doggabyte": 100}
_RATE_UNITS = {"kb/s": 1 / 1000, "kbps": 1 / 1000, "mb/s": 1, "mbps": 1, "gb/s": 1000, "gbps": 1000}

# element -> (site resource type, kind of unit); Processors counts cores, 100 CPU each
CONSUMABLES = {"Processors": ("CPU", "cores"), "Memory": ("Memory", "bytes"), "Disk": ("Disk", "bytes"),
               "Swap": ("Swap", "bytes"), "Network": ("Network", "rate")}
SITE_TYPE_OF = {v[0]: k for k, v in CONSUMABLES.items()}
UNAVAILABLE_STATES = {"offline", "down", "unknown"}
KNOWN_STATES = UNAVAILABLE_STATES | {"configured", "idle", "busy", "running"}
_TEXT_PROPERTIES = ("Opsys", "Arch", "Description")
_RANGE = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<body>[0-9,\- ]+)\](?P<suffix>[^\[\]]*)$")
_NUMBER = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$")


class _Reader:
    def __init__(self, path: str) -> None:
        self.path = path

    def error(self, elem, message: str) -> SiteError:
        line = getattr(elem, "sourceline", None)
        return SiteError(f"<{elem.tag}>: {message}" if elem is not None else message,
                         f"{self.path}:{line}" if line else self.path)

    def number(self, elem) -> float:
        text = (elem.text or "").strip()
        if not _NUMBER.match(text):
            raise self.error(elem, f"amount {text[:40]!r} is not a number")
        value = float(text)
        if value > MAX_CAPACITY * 2.0**100:   # more than any unit makes a site amount of (1e400 is infinite)
            raise self.error(elem, f"amount {text[:40]} is too large")
        if value < 0:
            raise self.error(elem, f"negative amount {text}")
        return value

    def amount(self, elem, kind: str) -> int:
        """The element's amount in site units (CPU, MB or Mb/s, or as given for a named Resource)."""
        value = self.number(elem)
        units = (elem.get("units") or "").strip()
        if kind == "cores":
            if units and units.lower() not in ("processors", "cores", "cpus"):
                raise self.error(elem, f"unknown units {units!r} for processors")
            if value != int(value):
                raise self.error(elem, f"{elem.text.strip()} processors is not a whole number (SSS: Integer)")
            scaled = value * 100
        elif kind == "bytes":
            scaled = value * 2.0 ** (self.byte_power(elem, units) - 20) if units else value
        elif kind == "rate":
            if units and units.lower() not in _RATE_UNITS:
                raise self.error(elem, f"unknown units {units!r} (Mb/s, Gb/s, kb/s)")
            scaled = value * _RATE_UNITS[units.lower()] if units else value
        else:
            if units:  # a named resource is counted in its own units; there is nothing to convert to
                raise self.error(elem, f"units={units!r} on a <Resource>: optlease counts it in its own units")
            scaled = value
        whole = int(scaled + 1e-9)
        if whole > MAX_CAPACITY:
            raise self.error(elem, f"amount {elem.text.strip()} {units} is more than {MAX_CAPACITY} site units")
        return whole

    def byte_power(self, elem, units: str) -> int:
        u = units.lower().rstrip("s") if units.lower().endswith("bytes") else units.lower()
        if u in _BYTE_WORDS:
            return _BYTE_WORDS[u]
        u = u.replace("ib", "b")
        if u.endswith("b"):
            u = u[:-1]
        if u in _BYTE_POWERS:
            return _BYTE_POWERS[u]
        raise self.error(elem, f"unknown units {units!r} (B, kB, MB, GB, TB, ... or their names)")

    def category(self, elem) -> tuple[dict[str, int], dict[str, int]]:
        """A Configured/Available/Utilized element: site type -> amount, and site type -> line."""
        out: dict[str, int] = {}
        lines: dict[str, int] = {}
        for child in elem:
            if not isinstance(child.tag, str):
                continue
            if child.tag == "Resource":
                name = (child.get("name") or "").strip()
                if not name:
                    raise self.error(child, "has no name= attribute (the spec requires one)")
                rtype = (child.get("type") or "").strip()
                key, amount = (f"{name}/{rtype}" if rtype else name), self.amount(child, "named")
            elif child.tag in CONSUMABLES:
                key, kind = CONSUMABLES[child.tag]
                amount = self.amount(child, kind)
            else:
                raise self.error(child, f"is not a consumable resource of <{elem.tag}> (Processors, Memory, Disk, "
                                        "Swap, Network, Resource)")
            if key in out and out[key] != amount:
                raise self.error(child, f"{key} given twice with different amounts ({out[key]} at line "
                                        f"{lines[key]}, {amount} here)")
            out[key], lines[key] = amount, child.sourceline
        return out, lines

    def names(self, elem) -> list[str]:
        """The node's names: its Name if given, else its Id, expanded (range, list) and repeated (`count`)."""
        ids = elem.findall("Id")
        if len(ids) != 1:
            raise self.error(elem, f"has {len(ids)} <Id> elements (a node has exactly one)")
        names_el = elem.findall("Name")
        if len(names_el) > 1:
            raise self.error(names_el[1], "a node has at most one <Name>")
        src = names_el[0] if names_el else ids[0]
        text = (src.text or "").strip()
        if not text:
            raise self.error(src, "is empty")
        names = self.expand(src, text)
        raw_count = elem.get("count")
        if raw_count is None:
            return names
        try:
            count = parse_whole(raw_count.strip(), 1, MAX_NODES)
        except ValueError:
            raise self.error(elem, f"count={raw_count[:20]!r} is not a whole number from 1 to {MAX_NODES}") from None
        if len(names) * count > MAX_NODES:
            raise self.error(elem, f"count={count} times {len(names)} names is more than {MAX_NODES} nodes")
        if count == 1:
            return names
        return [f"{name}-{i}" for name in names for i in range(1, count + 1)]

    def expand(self, elem, text: str) -> list[str]:
        aggregation = (elem.get("aggregation") or "").strip()
        if aggregation == "List":
            delimiter = elem.get("delimiter") or ","
            names = [n.strip() for n in text.split(delimiter)]
            if not all(names):
                raise self.error(elem, f"empty name in the list {text[:60]!r}")
            return names
        if aggregation not in ("", "Range", "Pattern"):
            raise self.error(elem, f"aggregation={aggregation!r} is not List or Range")
        match = _RANGE.match(text)
        if match is None:
            if "[" in text or "]" in text:
                raise self.error(elem, f"{text[:60]!r} is not a range of the form prefix[5-23,77]")
            return [text]
        out: list[str] = []
        for part in match["body"].split(","):
            low, dash, high = part.strip().partition("-")
            if not low.isdigit() or (dash and not high.isdigit()):
                raise self.error(elem, f"range part {part.strip()!r} is not N or N-M")
            a, b = int(low), int(high) if dash else int(low)
            if b < a or len(out) + b - a + 1 > MAX_NODES:
                raise self.error(elem, f"range part {part.strip()!r} is empty or names too many nodes")
            width = len(low) if low.startswith("0") else 0   # node[01-10] keeps its zero padding
            out += [f"{match['prefix']}{n:0{width}d}{match['suffix']}" for n in range(a, b + 1)]
        return out

    def online(self, elem) -> bool:
        state_el, online_el = elem.find("State"), elem.find("Online")
        up = True
        if state_el is not None:
            state = (state_el.text or "").strip().lower()
            if state not in KNOWN_STATES:
                raise self.error(state_el, f"unknown state {state[:30]!r} (Offline, Configured, Unknown, Idle, "
                                           "Busy)")
            up = state not in UNAVAILABLE_STATES
        if online_el is not None:
            value = (online_el.text or "").strip().lower()
            if value not in ("true", "false", "1", "0"):
                raise self.error(online_el, f"{value[:30]!r} is not a boolean (true, false)")
            up = up and value in ("true", "1")
        return up

    def node(self, elem) -> tuple[list[str], dict[str, int], dict, bool]:
        if not len(elem):
            raise self.error(elem, "is a reference to a node (text only), not a node description")
        configured = elem.findall("Configured")
        if len(configured) != 1:
            raise self.error(elem, f"has {len(configured)} <Configured> elements (optlease needs exactly one)")
        capacity, _ = self.category(configured[0])
        if "CPU" not in capacity or "Memory" not in capacity:
            raise self.error(configured[0], "has no Processors or no Memory (optlease needs both)")
        available = elem.find("Available")
        details: dict = {
            "features": [f.strip() for el in elem.findall("Feature") for f in (el.text or "").split(",") if f.strip()],
            "extensions": [self.extension(el) for el in elem.findall("Extension")],
            "available": self.category(available)[0] if available is not None else None,
        }
        for tag in _TEXT_PROPERTIES:
            el = elem.find(tag)
            if el is not None and (el.text or "").strip():
                details[tag.lower()] = el.text.strip()
        return self.names(elem), capacity, details, self.online(elem)

    def extension(self, elem) -> dict[str, str]:
        name = (elem.get("name") or "").strip()
        if not name:
            raise self.error(elem, "has no name= attribute (the spec requires one)")
        return {"name": name, "type": (elem.get("type") or "").strip(), "value": (elem.text or "").strip()}


def parse_sss(data: bytes, path: str = "<sss>") -> Site:
    """The site an SSS document describes: its online nodes in document order."""
    if len(data) > MAX_BYTES:
        raise InputError(f"an SSS document of {len(data)} bytes is more than optlease reads ({MAX_BYTES})", path)
    reader = _Reader(path)
    root = xml_root(data, path, "SSS")
    node_els = [root] if root.tag == "Node" else [el for el in root if el.tag == "Node"]
    if not node_els:
        raise reader.error(root, "holds no <Node> element")
    types: list[str] = []
    nodes: list[dict[str, int]] = []
    details: list[dict] = []
    seen: dict[str, int] = {}
    for el in node_els:
        names, capacity, info, up = reader.node(el)
        for name in names:
            if name in seen:
                raise reader.error(el, f"node {name!r} is described twice (first at line {seen[name]})")
            seen[name] = el.sourceline
        if not up:
            continue
        types += [t for t in capacity if t not in types]
        if len(nodes) + len(names) > MAX_NODES:
            raise reader.error(el, f"the site has more than {MAX_NODES} nodes")
        for name in names:
            nodes.append(dict(capacity))
            details.append({"name": name, **info})
    if not nodes:
        raise reader.error(root, "no node is online (every node's State is Offline/Down/Unknown)")
    ordered = ("CPU", "Memory") + tuple(t for t in types if t not in ("CPU", "Memory"))
    return Site(ordered, tuple(nodes), tuple(details))


def load_sss(path: str | Path) -> Site:
    return parse_sss(read_bounded(path, MAX_BYTES), str(path))
