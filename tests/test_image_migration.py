"""A suspended lease resumed on other nodes with images managed (`lease-preparation: imagetransfer`, `migration:
yes`): its disk image and its memory images are copied to those nodes over the repository's link, the disk image
first and not where the node's cache holds it, and the checker holds the copies to the link's bandwidth and each
resume to its disk image being there (the workloads' `<description>` says what happens and why)."""
from __future__ import annotations

import copy
import io

from optlease.checker import check_schedule
from optlease.engine.run import simulate
from optlease.formats.config import load_config
from optlease.formats.schedule_json import schedule_document

from test_haizea_fidelity import FIDELITY, at


def run(name: str, reuse: str = "none", migration: str = "yes"):
    cfg = load_config(FIDELITY / "fidelity.conf", overrides={
        "general": {"lease-preparation": "imagetransfer"},
        "scheduling": {"migration": migration}, "deploy-imagetransfer": {"diskimage-reuse": reuse}})
    result = simulate(cfg, tracefile=str(FIDELITY / name), out=io.StringIO())
    doc = schedule_document(result.site, result.leases, cfg.get("simulation", "starttime"), result.images)
    return {lease["id"]: lease for lease in doc["leases"]}, doc


def seconds(iso: str) -> int:
    return at(iso.split("T")[1])


def of(lease: dict, kind: str) -> list[dict]:
    return [r for r in lease["reservations"] if r["kind"] == kind]


def violations(doc: dict) -> list[str]:
    return [str(v) for v in check_schedule(doc)]


def test_copies_wait_for_the_link_and_the_disk_image_goes_first():
    leases, doc = run("migration-disk-images.lwf")
    assert violations(doc) == []
    copies = [(r["what"], seconds(r["start"]), seconds(r["end"]), r["from"]) for r in of(leases[1], "migrate")]
    # the link carries AR 3's transfer until 13:40: the 328 s of copies do not fit before it, so they follow it
    assert of(leases[3], "transfer")[0]["end"] == "2006-11-25T13:40:00"
    assert copies == [("disk-image", at("13:40:00"), at("13:41:22"), {"1": 1}),
                      ("disk-image", at("13:41:22"), at("13:42:44"), {"2": 1}),
                      ("memory-image", at("13:42:44"), at("13:44:06"), {"1": 1}),
                      ("memory-image", at("13:44:06"), at("13:45:28"), {"2": 1})]
    assert all(r["bandwidth"] == doc["images"]["bandwidth"] for r in of(leases[1], "migrate"))
    # Haizea's estimate of the copies (memory 2 x 164 s, disk 2 x 82 s) from where they can begin
    assert of(leases[1], "resume")[0]["start"] == "2006-11-25T13:48:12"
    assert leases[1]["state"] == "done"


def test_a_node_whose_cache_holds_the_image_gets_no_disk_copy():
    leases, doc = run("migration-cached-image.lwf", reuse="image-caches")
    assert violations(doc) == []
    resume = of(leases[2], "resume")[0]
    assert resume["mapping"] == {"1": 2, "2": 3}
    disk = [r for r in of(leases[2], "migrate") if r["what"] == "disk-image"]
    assert [(r["from"], r["mapping"]["2"]) for r in disk] == [({"2": 1}, 3)]
    cached = [c for c in doc["images"]["caches"] if c["node"] == 2 and c["image"] == "one.img"]
    assert cached and all(c["end"] is None or c["end"] >= resume["start"] for c in cached)
    # without caches both disk images are copied
    leases, doc = run("migration-cached-image.lwf")
    assert violations(doc) == []
    assert sorted(v for r in of(leases[2], "migrate") if r["what"] == "disk-image" for v in r["from"]) == ["1", "2"]


def test_images_on_shared_storage_move_with_the_lease():
    leases, doc = run("migration-disk-images.lwf", migration="yes-notransfer")
    assert violations(doc) == []
    moves = of(leases[1], "migrate")
    assert sorted(r["what"] for r in moves) == ["disk-image", "memory-image"]
    assert all(r["start"] == r["end"] and "bandwidth" not in r for r in moves)


def test_the_checker_wants_the_disk_image_where_a_lease_resumes():
    leases, doc = run("migration-disk-images.lwf")
    bad = copy.deepcopy(doc)
    lease = next(lease for lease in bad["leases"] if lease["id"] == 1)
    lease["reservations"] = [r for r in lease["reservations"] if r.get("what") != "disk-image"]
    assert [v for v in violations(bad) if "image-ready" in v] == [
        "lease 1: image-ready: vnode 1 resumes on node 3 at 2006-11-25T13:48:12 before image one.img is there"]


def test_the_checker_counts_copies_on_the_link():
    leases, doc = run("migration-disk-images.lwf")
    bad = copy.deepcopy(doc)
    lease = next(lease for lease in bad["leases"] if lease["id"] == 1)
    first = next(r for r in lease["reservations"] if r["kind"] == "migrate")
    # moved into AR 3's transfer (13:34:32 - 13:40:00)
    first["start"], first["end"] = "2006-11-25T13:38:00", "2006-11-25T13:39:22"
    assert [v for v in violations(bad) if "link-bandwidth" in v] == [
        "lease 1: link-bandwidth: transfers use 200 Mbit/s of the repository's link at 2006-11-25T13:38:00, more "
        "than its 100"]


def test_a_run_suspended_at_its_end_is_not_where_a_later_requeue_began():
    """A lease requeued after it was suspended and resumed loses every run's work, and each of its runs is marked
    requeued; the one it was suspended at the end of is still not where it started afresh: its resume finds the
    disk image copied for it, and the checker must not ask for a new transfer there (found on a Blue cut with
    caches, where two leases were flagged)."""
    leases, doc = run("migration-disk-images.lwf")
    marked = copy.deepcopy(doc)
    lease = next(lease for lease in marked["leases"] if lease["id"] == 1)
    kinds = [r["kind"] for r in lease["reservations"]]
    assert kinds.index("vm") < kinds.index("suspend") < kinds.index("resume") < len(kinds) - 1 - kinds[::-1].index("vm")
    for r in lease["reservations"]:
        if r["kind"] == "vm":
            r["outcome"] = "requeued"
    assert [v for v in violations(marked) if "image-ready" in v] == []
    lease["reservations"] = [r for r in lease["reservations"] if r.get("what") != "disk-image"]
    assert [v for v in violations(marked) if "image-ready" in v] == [
        "lease 1: image-ready: vnode 1 resumes on node 3 at 2006-11-25T13:48:12 before image one.img is there"]
