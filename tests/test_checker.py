"""The schedule checker: the contract's example passes, each broken rule is named, valid schedules always pass."""
from __future__ import annotations

import copy
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optlease.checker import check_schedule
from optlease.checker_read import FORMAT, Violation
from optlease.formats.timefmt import iso

ORIGIN = datetime(2006, 11, 25, 13, 0, 0)
DAY = "2006-11-25T"


def resv(kind: str, start: str, end: str, mapping: dict, **extra) -> dict:
    return {"kind": kind, "start": DAY + start, "end": DAY + end, "mapping": mapping, **extra}


def quickstart() -> dict:
    """The Haizea quickstart with its AR: lease 1 is suspended on node 1 while AR lease 2 holds all four nodes."""
    node = {"CPU": 100, "Memory": 1024}
    return {
        "format": FORMAT,
        "starttime": DAY + "13:00:00",
        "site": {"resource_types": ["CPU", "Memory"], "nodes": {str(n): dict(node) for n in range(1, 5)}},
        "leases": [
            {"id": 1, "type": "best-effort", "preemptible": True, "arrival": DAY + "13:00:00",
             "requested_start": None, "duration": 3600, "real_duration": 3600, "vms": {"1": dict(node)},
             "state": "done", "reservations": [
                 resv("vm", "13:00:00", "13:29:28", {"1": 1}),
                 resv("suspend", "13:29:28", "13:30:00", {"1": 1}),
                 resv("resume", "14:00:00", "14:00:32", {"1": 1}),
                 resv("vm", "14:00:32", "14:31:04", {"1": 1})]},
            {"id": 2, "type": "ar", "preemptible": False, "arrival": DAY + "13:15:00",
             "requested_start": DAY + "13:30:00", "duration": 1800, "real_duration": 1800,
             "vms": {str(v): dict(node) for v in range(1, 5)}, "state": "done", "reservations": [
                 resv("vm", "13:30:00", "14:00:00", {"1": 2, "2": 3, "3": 4, "4": 1})]},
        ],
    }


def immediate(reservations: list[dict]) -> dict:
    """An immediate lease arriving at 14:00 on node 2, which is free after the AR."""
    return {"id": 3, "type": "immediate", "preemptible": False, "arrival": DAY + "14:00:00", "requested_start": None,
            "duration": 1800, "vms": {"1": {"CPU": 50, "Memory": 512}}, "state": "done",
            "reservations": reservations}


def lease(doc: dict, lid: int) -> dict:
    return next(x for x in doc["leases"] if x["id"] == lid)


def rules(doc: dict) -> set[str]:
    return {v.rule for v in check_schedule(doc)}


def test_quickstart_with_ar_is_valid():
    assert check_schedule(quickstart()) == []


def test_capacity_violation_reads_as_one_line_naming_node_resource_amounts_and_time():
    doc = quickstart()
    lease(doc, 2)["vms"]["4"]["Memory"] = 2048
    lease(doc, 1)["reservations"][2]["start"] = DAY + "13:59:00"
    lines = [str(v) for v in check_schedule(doc)]
    # Memory is over from 13:30 on: that overload is reported once, when it begins, not again at 13:59.
    assert lines == [
        "lease 2: capacity: node 1 Memory 2048 > 1024 at 2006-11-25T13:30:00 by reservation 0 (vm)",
        "lease 1: capacity: node 1 CPU 200 > 100 at 2006-11-25T13:59:00 by reservation 2 (resume), "
        "with lease 2 reservation 0 (vm)"]


def _set(path: tuple, value):
    def mutate(doc: dict) -> None:
        *head, last = path
        target = doc
        for key in head:
            target = lease(target, key) if target is doc and isinstance(key, int) else target[key]
        target[last] = value
    return mutate


def _drop(path: tuple):
    def mutate(doc: dict) -> None:
        *head, last = path
        target = doc
        for key in head:
            target = lease(target, key) if target is doc and isinstance(key, int) else target[key]
        del target[last]
    return mutate


def _add_lease(new: dict):
    return lambda doc: doc["leases"].append(copy.deepcopy(new))


def _swap_first_two(doc: dict) -> None:
    r = lease(doc, 1)["reservations"]
    r[0], r[1] = r[1], r[0]


def _split_ar(doc: dict) -> None:
    mapping = {"1": 2, "2": 3, "3": 4, "4": 1}
    lease(doc, 2)["reservations"] = [resv("vm", "13:30:00", "13:45:00", mapping),
                                     resv("vm", "13:45:00", "14:00:00", mapping)]


def _requeue_without_outcome(doc: dict) -> None:
    lease(doc, 1)["preemptible"] = False
    lease(doc, 1)["reservations"] = [resv("vm", "13:00:00", "13:30:00", {"1": 1}),
                                     resv("vm", "14:00:00", "14:30:00", {"1": 1})]


def _node_key_as_number(doc: dict) -> None:
    nodes = doc["site"]["nodes"]
    nodes[1] = nodes.pop("1")


# Each mutation breaks exactly one rule of the contract, and the checker names exactly that rule.
MUTATIONS = [
    pytest.param(_set(("format",), "optlease-schedule/2"), "format", id="format-key"),
    pytest.param(_drop((1, "state")), "format", id="missing-state"),
    pytest.param(_drop(("leases",)), "format", id="missing-leases"),
    pytest.param(_set((1, "preemptible"), "yes"), "format", id="preemptible-not-bool"),
    pytest.param(_set((1, "id"), "1"), "format", id="lease-id-string"),
    pytest.param(_set((1, "duration"), "01:00:00"), "format", id="duration-not-number"),
    pytest.param(_set((2, "requested_start"), None), "format", id="ar-without-requested-start"),
    pytest.param(_node_key_as_number, "format", id="node-key-number"),
    pytest.param(_set((1, "reservations", 0, "mapping", "1"), True), "format", id="mapping-to-bool"),
    pytest.param(_set((1, "arrival"), "2006-11-25 13:00:00"), "time-format", id="time-with-space"),
    pytest.param(_set((1, "arrival"), "2006-11-25T13:00:00.5"), "time-format", id="time-fractional"),
    pytest.param(_set((1, "arrival"), "2006-11-25T13:00:00Z"), "time-format", id="time-with-zone"),
    pytest.param(_set((1, "reservations", 3, "end"), "2006-11-25T14:61:04"), "time-format", id="time-impossible"),
    pytest.param(_set(("starttime",), 0), "time-format", id="starttime-number"),
    pytest.param(_set((1, "reservations", 2, "end"), DAY + "13:59:59"), "interval", id="end-before-start"),
    pytest.param(_swap_first_two, "order", id="out-of-time-order"),
    pytest.param(_set((2, "id"), 1), "duplicate-id", id="duplicate-id"),
    pytest.param(_set((1, "reservations", 1, "kind"), "hibernate"), "kind", id="unknown-kind"),
    pytest.param(_set((1, "reservations", 0, "mapping"), {"1": 9}), "mapping", id="unknown-node"),
    pytest.param(_drop((2, "reservations", 0, "mapping", "4")), "mapping", id="vnode-unmapped"),
    pytest.param(_set((2, "reservations", 0, "mapping", "5"), 1), "mapping", id="unknown-vnode"),
    pytest.param(_set((1, "reservations", 2, "kind"), "migrate"), "mapping", id="migrate-without-from"),
    pytest.param(_set((1, "vms", "1", "GPU"), 1), "resource-type", id="demand-not-a-resource-type"),
    pytest.param(_set((1, "reservations", 2, "start"), DAY + "13:59:00"), "capacity", id="resume-overlaps-ar"),
    pytest.param(_set((2, "vms", "2", "CPU"), 101), "capacity", id="demand-above-node"),
    pytest.param(_set((1, "arrival"), DAY + "13:00:01"), "arrival", id="starts-before-arrival"),
    pytest.param(_set((1, "real_duration"), 3000), "real-duration", id="ran-longer-than-real-duration"),
    pytest.param(_set((1, "reservations", 3, "end"), DAY + "14:30:00"), "real-duration", id="ran-too-short"),
    pytest.param(lambda d: (_set((1, "duration"), 3599)(d), _set((1, "real_duration"), 3599)(d)),
                 "over-duration", id="ran-longer-than-duration"),
    pytest.param(_set((2, "requested_start"), DAY + "13:29:00"), "ar-start", id="ar-starts-late"),
    pytest.param(_split_ar, "ar-interrupted", id="ar-split-in-two"),
    pytest.param(_add_lease(immediate([resv("vm", "14:00:10", "14:30:10", {"1": 2})])),
                 "immediate-start", id="immediate-starts-late"),
    pytest.param(_add_lease(immediate([resv("transfer", "14:00:00", "14:00:10", {"1": 2}),
                                       resv("vm", "14:00:20", "14:30:20", {"1": 2})])),
                 "immediate-start", id="immediate-waits-after-transfer"),
    pytest.param(_set((1, "preemptible"), False), "non-preemptible", id="non-preemptible-suspended"),
    pytest.param(_requeue_without_outcome, "non-preemptible", id="non-preemptible-runs-twice"),
    pytest.param(lambda d: lease(d, 1)["reservations"].pop(2), "suspend-resume", id="no-resume"),
    pytest.param(lambda d: lease(d, 1)["reservations"].pop(1), "suspend-resume", id="no-suspend"),
    pytest.param(_set((2, "state"), "rejected"), "rejected-has-vm", id="rejected-ar-runs"),
]


@pytest.mark.parametrize("mutate, rule", MUTATIONS)
def test_each_broken_rule_is_named(mutate, rule):
    doc = quickstart()
    mutate(doc)
    violations = check_schedule(doc)
    assert {v.rule for v in violations} == {rule}, [str(v) for v in violations]
    assert all("\n" not in str(v) for v in violations)


@pytest.mark.parametrize("kind, what, flagged", [
    pytest.param("migrate", None, {"1", "2"}, id="migrate-holds-source-and-destination"),
    pytest.param("migrate", "memory-image", set(), id="memory-image-copy-holds-nothing"),
    pytest.param("transfer", None, set(), id="transfer-holds-nothing"),
])
def test_what_a_reservation_with_a_from_mapping_holds(kind, what, flagged):
    doc = quickstart()
    doc["leases"].append(immediate([resv("vm", "14:00:00", "14:30:00", {"1": 2})]))
    lease(doc, 3)["vms"]["1"] = {"CPU": 100, "Memory": 1024}  # node 2 is full from 14:00
    lease(doc, 1)["reservations"][2].update({"kind": kind, "from": {"1": 2}})  # and node 1 too, by lease 1
    if what is not None:
        lease(doc, 1)["reservations"][2]["what"] = what
    lease(doc, 1)["reservations"].insert(2, resv("resume", "14:00:00", "14:00:32", {"1": 1}))
    violations = check_schedule(doc)
    assert {v.rule for v in violations} <= {"capacity"}
    assert {v.message.split()[1] for v in violations} == flagged


def _requeued(doc: dict) -> None:
    # Haizea's quickstart with suspension off: lease 1 is cancelled for the AR and runs again from scratch.
    lease(doc, 1)["reservations"] = [resv("vm", "13:00:00", "13:30:00", {"1": 1}, outcome="requeued"),
                                     resv("vm", "14:00:00", "15:00:00", {"1": 1})]


def _cold_migration(doc: dict) -> None:
    # Lease 1 resumes on node 2: its memory image is copied over while the AR runs, then it migrates and resumes.
    lease(doc, 1)["reservations"][2:] = [
        resv("transfer", "13:30:00", "13:40:00", {"1": 2}, **{"from": {"1": 1}}),
        resv("migrate", "14:00:00", "14:00:30", {"1": 2}, **{"from": {"1": 1}}),
        resv("resume", "14:00:30", "14:01:02", {"1": 2}),
        resv("vm", "14:01:02", "14:31:34", {"1": 2})]


def _extra_keys(doc: dict) -> None:
    doc["generator"] = {"name": "optlease", "version": "0.1.0"}
    doc["site"]["nodes"]["1"]["hostname"] = "node-1"
    lease(doc, 1)["wait"] = 0
    lease(doc, 1)["reservations"][0]["note"] = "started on arrival"
    lease(doc, 2)["reservations"][0]["outcome"] = "completed"


# Schedules the contract allows that a careless checker might refuse.
VALID = [
    pytest.param(lambda d: None, id="quickstart"),
    pytest.param(_set((1, "real_duration"), 3599), id="real-duration-within-1s"),
    pytest.param(_drop((1, "real_duration")), id="real-duration-absent"),
    pytest.param(lambda d: (_set((1, "real_duration"), 9000)(d)), id="real-duration-cut-at-duration"),
    pytest.param(_requeued, id="requeued-run-is-lost-work"),
    pytest.param(_cold_migration, id="transfer-and-migrate"),
    pytest.param(_extra_keys, id="extra-keys"),
    pytest.param(_add_lease(immediate([resv("vm", "14:00:00", "14:30:00", {"1": 2})])), id="immediate-at-arrival"),
    pytest.param(_add_lease(immediate([resv("transfer", "14:00:00", "14:00:10", {"1": 2}),
                                       resv("vm", "14:00:10", "14:30:10", {"1": 2})])),
                 id="immediate-after-transfer"),
    pytest.param(_add_lease({**immediate([]), "state": "rejected"}), id="rejected-immediate"),
    pytest.param(lambda d: lease(d, 2)["vms"].update({"5": {"CPU": 0, "Memory": 0}})
                 or lease(d, 2)["reservations"][0]["mapping"].update({"5": 1}), id="zero-demand-vm-shares-node"),
]


@pytest.mark.parametrize("mutate", VALID)
def test_allowed_variations_pass(mutate):
    doc = quickstart()
    mutate(doc)
    assert [str(v) for v in check_schedule(doc)] == []


@pytest.mark.parametrize("doc, message", [
    pytest.param([], "not a JSON object", id="list"),
    pytest.param({"format": FORMAT}, "leases is missing", id="nearly-empty"),
])
def test_documents_that_are_not_schedules(doc, message):
    violations = check_schedule(doc)
    assert any(message in v.message for v in violations)
    assert {v.rule for v in violations} == {"format"}


def test_violation_names_lease_rule_and_message():
    v = Violation(3, "capacity", "node 2 Memory 2048 > 1024 at 2006-11-25T13:30:00")
    assert str(v) == "lease 3: capacity: node 2 Memory 2048 > 1024 at 2006-11-25T13:30:00"
    assert str(Violation(None, "format", "x")) == "schedule: format: x"
    assert v.as_dict() == {"lease": 3, "rule": "capacity", "message": v.message}


# --- property: schedules placed without overlap always pass; an overload on top is always caught -------------

@st.composite
def placed_schedules(draw) -> dict:
    """A random site and leases placed one after another on each node (each node's VMs fit it together)."""
    nodes = {str(n): {"CPU": draw(st.sampled_from([100, 200, 400])), "Memory": draw(st.sampled_from([512, 1024]))}
             for n in range(1, draw(st.integers(1, 4)) + 1)}
    free_at = {n: 0 for n in nodes}
    leases = []
    for lid in range(1, draw(st.integers(1, 10)) + 1):
        nvms = draw(st.integers(1, 3))
        mapping = {str(v): draw(st.sampled_from(sorted(nodes))) for v in range(1, nvms + 1)}
        # Every vnode asks at most its share of the smallest node, so vnodes sharing a node still fit.
        share = {t: min(nodes[n][t] for n in nodes) // nvms for t in ("CPU", "Memory")}
        vms = {v: {t: draw(st.integers(0, share[t])) for t in share} for v in mapping}
        start = max(free_at[n] for n in mapping.values()) + draw(st.integers(0, 600))
        duration = draw(st.integers(2, 7200))
        on = {v: int(n) for v, n in mapping.items()}
        preempted = draw(st.booleans())
        if preempted:
            first = draw(st.integers(1, duration - 1))
            suspend_end = start + first + draw(st.integers(1, 60))
            resume_start = suspend_end + draw(st.integers(0, 600))
            resume_end = resume_start + draw(st.integers(1, 60))
            spans = [("vm", start, start + first), ("suspend", start + first, suspend_end),
                     ("resume", resume_start, resume_end), ("vm", resume_end, resume_end + duration - first)]
        else:
            spans = [("vm", start, start + duration)]
        end = spans[-1][2]
        for n in mapping.values():
            free_at[n] = end
        leases.append({
            "id": lid, "type": "best-effort", "preemptible": preempted or draw(st.booleans()),
            "arrival": iso(ORIGIN, draw(st.integers(0, start))), "requested_start": None,
            "duration": duration, "real_duration": duration, "vms": vms, "state": "done",
            "reservations": [{"kind": k, "start": iso(ORIGIN, s), "end": iso(ORIGIN, e), "mapping": on}
                             for k, s, e in spans]})
    return {"format": FORMAT, "starttime": iso(ORIGIN, 0),
            "site": {"resource_types": ["CPU", "Memory"], "nodes": nodes}, "leases": leases}


@settings(max_examples=150, deadline=None)
@given(placed_schedules())
def test_schedules_placed_without_overlap_pass(doc):
    assert [str(v) for v in check_schedule(doc)] == []


@settings(max_examples=150, deadline=None)
@given(placed_schedules(), st.data())
def test_an_overlapping_reservation_beyond_capacity_is_always_flagged(doc, data):
    victim = data.draw(st.sampled_from(doc["leases"]))
    held = data.draw(st.sampled_from(victim["reservations"]))
    vnode = data.draw(st.sampled_from(sorted(held["mapping"])))
    node = str(held["mapping"][vnode])
    if all(victim["vms"][v]["CPU"] == 0 for v in held["mapping"] if str(held["mapping"][v]) == node):
        victim["vms"][vnode]["CPU"] = 1  # the victim must hold something for an overlap to overload
    start = datetime.fromisoformat(held["start"])
    span = int((datetime.fromisoformat(held["end"]) - start).total_seconds())
    at = int((start - ORIGIN).total_seconds()) + data.draw(st.integers(0, span - 1))
    length = data.draw(st.integers(1, 3600))
    doc["leases"].append({
        "id": len(doc["leases"]) + 1, "type": "best-effort", "preemptible": False, "arrival": iso(ORIGIN, at),
        "requested_start": None, "duration": length, "vms": {"1": {"CPU": doc["site"]["nodes"][node]["CPU"]}},
        "state": "done", "reservations": [
            {"kind": "vm", "start": iso(ORIGIN, at), "end": iso(ORIGIN, at + length), "mapping": {"1": int(node)}}]})
    violations = check_schedule(doc)
    assert {v.rule for v in violations} == {"capacity"}
    assert any(v.message.startswith(f"node {node} CPU ") for v in violations)


def big_schedule(nleases: int = 10_000, nnodes: int = 144) -> dict:
    """A valid schedule of the size the contract promises to check quickly: 2-VM leases, half of them suspended."""
    nodes = {str(n): {"CPU": 100, "Memory": 2048} for n in range(1, nnodes + 1)}
    free_at = [0] * (nnodes + 1)
    leases = []
    for lid in range(1, nleases + 1):
        a, b = lid % nnodes + 1, (lid * 7) % nnodes + 1
        start = max(free_at[a], free_at[b]) + lid % 13
        on = {"1": a, "2": b}
        if lid % 2:
            spans = [("vm", start, start + 600), ("suspend", start + 600, start + 630),
                     ("resume", start + 900, start + 930), ("vm", start + 930, start + 1530)]
        else:
            spans = [("transfer", start, start + 60), ("vm", start + 60, start + 1260)]
        free_at[a] = free_at[b] = spans[-1][2]
        leases.append({"id": lid, "type": "best-effort", "preemptible": True, "arrival": iso(ORIGIN, start),
                       "requested_start": None, "duration": 1200, "vms": {"1": {"CPU": 50, "Memory": 1024},
                                                                            "2": {"CPU": 50, "Memory": 1024}},
                       "state": "done", "reservations": [{"kind": k, "start": iso(ORIGIN, s), "end": iso(ORIGIN, e),
                                                          "mapping": on} for k, s, e in spans]})
    return {"format": FORMAT, "starttime": iso(ORIGIN, 0),
            "site": {"resource_types": ["CPU", "Memory"], "nodes": nodes}, "leases": leases}


def test_ten_thousand_leases_on_144_nodes_with_every_span_kind_check_clean():
    assert check_schedule(big_schedule()) == []
