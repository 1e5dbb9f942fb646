"""Workloads written as Haizea's LWF XML, in its relative time notation, readable by Haizea and by `parse_lwf`.

Times (arrival, exact start, deadline) are written relative to the workload start (`01:00:00.00`,
`1:00:12:23.00` past a day), durations in the same notation. Identical consecutive VMs (or site nodes) become one
`<node-set numnodes>`. `<realduration>` is written only when it differs from the duration. A lease's `extra`
entries (except `source`, which names where it was read from) go into Haizea's `<extra><attr name value/>`.
"""
from __future__ import annotations

from itertools import groupby

from lxml import etree

from optlease.domain.lease import LeaseKind, LeaseRequest
from optlease.domain.site import Site
from optlease.formats.lwf import Workload
from optlease.formats.timefmt import format_duration

_NOT_WRITTEN = frozenset({"source"})


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _nodes(parent: etree._Element, capacities: tuple[dict[str, int], ...]) -> None:
    nodes = etree.SubElement(parent, "nodes")
    for capacity, group in groupby(capacities):
        node_set = etree.SubElement(nodes, "node-set", numnodes=str(sum(1 for _ in group)))
        for rtype, amount in capacity.items():
            if amount:  # a missing type means 0, and <res> amounts are positive
                etree.SubElement(node_set, "res", type=rtype, amount=str(amount))


def _site(parent: etree._Element, site: Site) -> None:
    elem = etree.SubElement(parent, "site")
    etree.SubElement(elem, "resource-types", names=" ".join(site.resource_types))
    _nodes(elem, site.nodes)


def _start(lease: etree._Element, request: LeaseRequest) -> None:
    start = etree.SubElement(lease, "start")
    if request.kind is LeaseKind.AR:
        if request.start is None:
            raise ValueError(f"lease {request.id} is an AR without a start time")
        etree.SubElement(start, "exact", time=format_duration(request.start))
    elif request.kind is LeaseKind.IMMEDIATE:
        etree.SubElement(start, "now")


def _request(parent: etree._Element, request: LeaseRequest) -> None:
    elem = etree.SubElement(parent, "lease-request", arrival=format_duration(request.arrival))
    if request.real_duration is not None and request.real_duration != request.duration:
        etree.SubElement(elem, "realduration", time=format_duration(request.real_duration))
    lease = etree.SubElement(elem, "lease", id=str(request.id), preemptible=_bool(request.preemptible))
    _nodes(lease, request.vms)
    _start(lease, request)
    etree.SubElement(lease, "duration", time=format_duration(request.duration))
    software = etree.SubElement(lease, "software")
    if request.software is None:
        etree.SubElement(software, "none")
    else:
        etree.SubElement(software, "disk-image", id=request.software.id, size=str(request.software.size))
    if request.deadline is not None:
        etree.SubElement(lease, "deadline", time=format_duration(request.deadline))
    extras = [(k, v) for k, v in request.extra.items() if k not in _NOT_WRITTEN]
    if extras:
        extra = etree.SubElement(lease, "extra")
        for name, value in extras:
            etree.SubElement(extra, "attr", name=name, value=str(value))


def dump_lwf(workload: Workload) -> bytes:
    """The workload as a pretty-printed LWF XML document (UTF-8, with an XML declaration)."""
    root = etree.Element("lease-workload", name=workload.name)
    if workload.description:
        etree.SubElement(root, "description").text = workload.description
    if workload.site is not None:
        _site(root, workload.site)
    requests = etree.SubElement(root, "lease-requests")
    for request in workload.requests:
        _request(requests, request)
    return etree.tostring(root, pretty_print=True, xml_declaration=True, encoding="UTF-8")
