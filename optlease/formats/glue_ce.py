"""optlease published as a GLUE 1.1 Computing Element, with its Cluster and SubClusters: LDIF in the GLUE 1.x LDAP
schema (what a BDII's GIP provider prints, under `mds-vo-name=resource,o=grid`) and XML in GLUE's own names.

A SubCluster is a run of identical nodes of the site (PhysicalCPUs = LogicalCPUs = their cores, SMPSize the cores
of one node, RAMSize its MB), so that `optlease.formats.glue` reads the same site back. Leases are the CE's jobs
(the XML lists them; GLUE's LDAP schema has no job object).
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from itertools import groupby

from lxml import etree

from optlease.domain.site import Site
from optlease.formats.glue import GLUE_LDAP

SUFFIX = "mds-vo-name=resource,o=grid"


@dataclass
class CEState:
    """What the CE publishes; times in seconds, CPUs in whole cores (100 CPU units)."""

    host: str
    port: int
    version: str
    total_cpus: int
    running: int
    waiting: int
    free_cpus: int
    estimated_response: int
    worst_response: int
    status: str = "Production"
    assigned_slots: int = 0
    jobs: list[tuple[int, str]] = field(default_factory=list)   # (lease id, GLUE job status)

    @property
    def unique_id(self) -> str:
        return f"{self.host}:{self.port}/jobmanager-optlease-default"

    @property
    def cluster_id(self) -> str:
        return self.host


def subclusters(site: Site) -> list[tuple[int, dict[str, int], dict]]:
    """(number of nodes, capacity, first node's details) for each run of identical consecutive nodes."""
    details = list(site.details) + [{}] * (len(site.nodes) - len(site.details))
    out = []
    for cap, group in groupby(zip(site.nodes, details), key=lambda pair: tuple(sorted(pair[0].items()))):
        members = list(group)
        out.append((len(members), dict(cap), members[0][1]))
    return out


def ce_attributes(ce: CEState) -> dict[str, object]:
    return {
        "GlueCEUniqueID": ce.unique_id, "GlueCEName": "default",
        "GlueCEInfoLRMSType": "optlease", "GlueCEInfoLRMSVersion": ce.version,
        "GlueCEInfoHostName": ce.host, "GlueCEInfoGatekeeperPort": ce.port, "GlueCEInfoTotalCPUs": ce.total_cpus,
        "GlueCEStateRunningJobs": ce.running, "GlueCEStateWaitingJobs": ce.waiting,
        "GlueCEStateTotalJobs": ce.running + ce.waiting, "GlueCEStateFreeCPUs": ce.free_cpus,
        "GlueCEStateEstimatedResponseTime": ce.estimated_response,
        "GlueCEStateWorstResponseTime": ce.worst_response, "GlueCEStateStatus": ce.status,
        # 0 = not specified (GLUE): optlease bounds neither a lease's wall time nor the number of leases
        "GlueCEPolicyMaxWallClockTime": 0, "GlueCEPolicyMaxCPUTime": 0, "GlueCEPolicyMaxTotalJobs": 0,
        "GlueCEPolicyMaxRunningJobs": 0, "GlueCEPolicyPriority": 0,
        "GlueCEPolicyAssignedJobSlots": ce.assigned_slots or ce.total_cpus,
    }


def _sub_attributes(i: int, count: int, cap: dict[str, int], info: dict) -> dict[str, object]:
    cores = cap.get("CPU", 0) // 100
    attrs: dict[str, object] = {
        "GlueSubClusterUniqueID": f"subcluster-{i}", "GlueSubClusterName": info.get("name", f"subcluster-{i}"),
        "GlueSubClusterPhysicalCPUs": cores * count, "GlueSubClusterLogicalCPUs": cores * count,
        "GlueHostArchitectureSMPSize": cores, "GlueHostMainMemoryRAMSize": cap.get("Memory", 0),
    }
    if cap.get("Swap"):
        attrs["GlueHostMainMemoryVirtualSize"] = cap["Swap"]
    for key, ldap in GLUE_LDAP.items():
        if key in info and ldap not in attrs and key not in ("UniqueID",):
            attrs[ldap] = info[key]
    return attrs


def _ldif_line(name: str, value: object) -> str:
    text = str(value)
    # RFC 2849: a value that is not a SAFE-STRING is written in base64
    if not text.isascii() or text[:1] in (" ", ":", "<") or text.endswith(" ") or "\n" in text or "\r" in text:
        return f"{name}:: {base64.b64encode(text.encode()).decode()}"
    return f"{name}: {text}"


def _entry(dn: str, classes: list[str], attrs: dict[str, object]) -> list[str]:
    lines = [_ldif_line("dn", dn)] + [f"objectClass: {c}" for c in classes]
    lines += [_ldif_line(k, v) for k, v in attrs.items()]
    return lines + [""]


def write_ldif(ce: CEState, site: Site) -> str:
    schema = {"GlueSchemaVersionMajor": 1, "GlueSchemaVersionMinor": 1}
    cluster_dn = f"GlueClusterUniqueID={ce.cluster_id},{SUFFIX}"
    lines = _entry(f"GlueCEUniqueID={ce.unique_id},{SUFFIX}",
                   ["GlueCETop", "GlueCE", "GlueCEInfo", "GlueCEState", "GlueCEPolicy", "GlueInformationService",
                    "GlueKey", "GlueSchemaVersion"],
                   {**ce_attributes(ce), "GlueForeignKey": f"GlueClusterUniqueID={ce.cluster_id}", **schema})
    lines += _entry(cluster_dn, ["GlueClusterTop", "GlueCluster", "GlueInformationService", "GlueKey",
                                 "GlueSchemaVersion"],
                    {"GlueClusterUniqueID": ce.cluster_id, "GlueClusterName": ce.cluster_id,
                     "GlueForeignKey": f"GlueCEUniqueID={ce.unique_id}", **schema})
    for i, (count, cap, info) in enumerate(subclusters(site), start=1):
        lines += _entry(f"GlueSubClusterUniqueID=subcluster-{i},{cluster_dn}",
                        ["GlueClusterTop", "GlueSubCluster", "GlueHostArchitecture", "GlueHostMainMemory",
                         "GlueHostOperatingSystem", "GlueKey", "GlueSchemaVersion"],
                        {**_sub_attributes(i, count, cap, info),
                         "GlueChunkKey": f"GlueClusterUniqueID={ce.cluster_id}", **schema})
    return "\n".join(lines)


def write_xml(ce: CEState, site: Site) -> str:
    root = etree.Element("ComputingElement")
    attrs = ce_attributes(ce)
    etree.SubElement(root, "UniqueID").text = ce.unique_id
    etree.SubElement(root, "Name").text = "default"
    for part in ("Info", "State", "Policy"):
        elem = etree.SubElement(root, part)
        prefix = f"GlueCE{part}"
        for key, value in attrs.items():
            if key.startswith(prefix):
                etree.SubElement(elem, key[len(prefix):]).text = str(value)
    for lease_id, status in ce.jobs:
        job = etree.SubElement(root, "Job")
        etree.SubElement(job, "LocalID").text = str(lease_id)
        etree.SubElement(job, "Status").text = status
    cluster = etree.SubElement(root, "Cluster")
    etree.SubElement(cluster, "Name").text = ce.cluster_id
    etree.SubElement(cluster, "UniqueID").text = ce.cluster_id
    for i, (count, cap, info) in enumerate(subclusters(site), start=1):
        sub = etree.SubElement(cluster, "SubCluster")
        by_ldap = {v: k for k, v in GLUE_LDAP.items()}
        for ldap, value in _sub_attributes(i, count, cap, info).items():
            path = by_ldap[ldap].split("/")
            parent = sub if len(path) == 1 else (sub.find(path[0]) if sub.find(path[0]) is not None
                                                 else etree.SubElement(sub, path[0]))
            etree.SubElement(parent, path[-1]).text = str(value)
    return etree.tostring(root, pretty_print=True, encoding="unicode")
