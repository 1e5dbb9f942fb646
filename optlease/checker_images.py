"""The schedule contract's rules on disk images, for a schedule whose run managed them (`images` in the document,
written under `lease-preparation: imagetransfer`): the repository's link never carries more than its bandwidth (the
copies of a suspended lease's images to other nodes that went over it, `migrate` reservations with a `bandwidth`,
count as its transfers do), every VM starts from scratch only once its lease's image is on its node (brought by a
transfer that fed it, or in the node's cache), a VM resumes only where its disk image is (where it was suspended,
where a `disk-image` copy brought it, or in the node's cache), and no node's cache ever holds more than its
size."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

Flag = Callable[[int | None, str, str], Any]


def check_images(images: Any, leases: Callable[[], Iterable[Any]], seconds: Callable[[Any], int | None],
                 when: Callable[[int], str], flag: Flag) -> Iterator[Any]:
    """Violations (built by `flag(lease, rule, message)`) of the image rules of a document's `images` section (None:
    images not managed, nothing to check); `leases()` gives the document's leases, read once, one at a time."""
    if images is None:
        return
    if not isinstance(images, dict) or not _number(images.get("bandwidth")):
        yield flag(None, "format", "images is not an object with the link's bandwidth (Mbit/s)")
        return
    spans = list(_spans(images, seconds, flag))
    faults = [s for s in spans if not isinstance(s, tuple)]
    if faults:
        yield from faults
        return
    seen: dict[Any, tuple[int, int, float, int]] = {}
    first: list[Any] = []      # each lease's image-ready violations, reported after the link's and the caches'
    for lease in leases():
        if isinstance(lease, dict):
            faults.extend(_transfers(lease, images["bandwidth"], seconds, seen, flag))
            first.extend(_image_first(lease, spans, seconds, when, flag))
    yield from faults
    yield from _link(seen, images["bandwidth"], when, flag)
    yield from _cache_size(spans, images.get("cache_size"), when, flag)
    yield from first


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _spans(images: dict, seconds, flag) -> Iterator[Any]:
    """(node, image, size, start, end or None) of each stay of an image in a cache, or a violation."""
    for i, raw in enumerate(images.get("caches") or []):
        start = seconds(raw.get("start")) if isinstance(raw, dict) else None
        end = raw.get("end") if isinstance(raw, dict) else None
        end_s = None if end is None else seconds(end)
        if start is None or (end is not None and end_s is None) or not _number(raw.get("size")):
            yield flag(None, "format", f"images.caches[{i}] is not an object with node, image, size, start, end")
            return
        yield (str(raw.get("node")), raw.get("image"), raw["size"], start, end_s)


def _transfers(lease: dict, bandwidth: float, seconds, seen: dict[Any, tuple[int, int, float, int]],
               flag: Flag) -> list[Any]:
    """Transfers are listed under every lease they feed: each one (by its `transfer` id) counts once. A copy of a
    lease's images over the link is listed under that lease alone. Returns the format violations (a rate that is
    not a number)."""
    out = []
    for r in lease.get("reservations") or []:
        if not isinstance(r, dict):
            continue
        copy = r.get("kind") == "migrate" and "bandwidth" in r
        if r.get("kind") == "transfer" or copy:
            start, end = seconds(r.get("start")), seconds(r.get("end"))
            if start is None or end is None:
                continue
            key = ("copy", lease.get("id"), r.get("start")) if copy \
                else r.get("transfer", (lease.get("id"), r.get("start")))
            rate = r.get("bandwidth", bandwidth)
            if not _number(rate):
                out.append(flag(lease.get("id"), "format", f"a {r.get('kind')} reservation's bandwidth is not a "
                                                           f"positive number: {str(rate)[:40]}"))
            # a hostile id (a list, a string) is a transfer of its own; a rate that is not a number, the whole link
            seen.setdefault(repr(key), (start, end, rate if _number(rate) else bandwidth, lease.get("id")))
    return out


def _link(seen: dict[Any, tuple[int, int, float, int]], bandwidth: float, when, flag) -> Iterator[Any]:
    """The repository's link never carries more than its bandwidth, each transfer counted once."""
    events = sorted([(s, 1, b, lid) for s, e, b, lid in seen.values() if e > s]
                    + [(e, 0, b, lid) for s, e, b, lid in seen.values() if e > s])
    used, over = 0.0, False
    for t, starting, b, lid in events:
        used += b if starting else -b
        if used > bandwidth + 1e-9 and not over:
            over = True
            yield flag(lid, "link-bandwidth", f"transfers use {used:g} Mbit/s of the repository's link at {when(t)}, "
                                              f"more than its {bandwidth:g}")
        elif used <= bandwidth + 1e-9:
            over = False


def _cache_size(spans: list[tuple], size: Any, when, flag) -> Iterator[Any]:
    if size is None:
        return
    if not (isinstance(size, (int, float)) and not isinstance(size, bool) and size >= 0):
        yield flag(None, "format", f"images.cache_size {str(size)[:40]!r} is not a number of MB >= 0")
        return
    by_node: dict[str, list[tuple[int, int, float]]] = {}
    for node, _, mb, start, end in spans:
        events = by_node.setdefault(node, [])
        events.append((start, 1, mb))
        if end is not None:
            events.append((end, 0, mb))
    for node, events in sorted(by_node.items()):
        used = 0.0
        for t, adding, mb in sorted(events):
            used += mb if adding else -mb
            if used > size + 1e-9:
                yield flag(None, "cache-size", f"node {node}'s image cache holds {used:g} MB at {when(t)}, more than "
                                               f"its {size:g} MB")
                break


def _image_first(lease: dict, spans: list[tuple], seconds, when, flag) -> Iterator[Any]:
    """Each run that starts a lease from scratch (its first, or the first after a requeue) finds the image on every
    node it uses; each resume finds it on every node it resumes on."""
    image = lease.get("image")
    if not isinstance(image, dict):
        return
    resvs = [r for r in lease.get("reservations") or [] if isinstance(r, dict)]
    arrived: list[tuple[int, str, str]] = []      # (end, vnode, node) of the transfers that fed the lease
    disk: dict[str, list[tuple[int, str]]] = {}   # vnode -> (since, node) where its own copy of the image went
    fresh = True

    def in_cache(node: str, start: int) -> bool:
        return any(n == node and img == image.get("id") and s <= start and (e is None or e >= start)
                   for n, img, _, s, e in spans)

    # copies (transfers, disk-image migrations) before what starts at their end
    for r in sorted(resvs, key=lambda r: (seconds(r.get("start")) or 0, r.get("kind") not in ("transfer", "migrate"))):
        start = seconds(r.get("start"))
        if start is None:
            continue
        if r.get("kind") == "transfer" and r.get("image") == image.get("id"):
            end = seconds(r.get("end"))
            arrived.extend((end, str(v), str(p)) for v, p in (r.get("mapping") or {}).items() if end is not None)
        elif r.get("kind") == "migrate" and r.get("what") == "disk-image" and r.get("outcome") is None:
            end = seconds(r.get("end"))
            for vnode in r.get("from") or {}:
                node = (r.get("mapping") or {}).get(vnode)
                if end is not None and node is not None:
                    disk.setdefault(str(vnode), []).append((end, str(node)))
        elif r.get("kind") == "resume" and not fresh:
            gap = _first_without(r, start, in_cache,
                                 lambda v, n: any(p == n and since <= start for since, p in disk.get(v, ())))
            if gap:
                yield flag(lease.get("id"), "image-ready", _not_there(gap, "resumes", when(start), image))
                return
        elif r.get("kind") == "vm":
            if fresh:
                gap = _first_without(r, start, in_cache,
                                     lambda v, n: any(e <= start and vn == v and p == n for e, vn, p in arrived))
                if gap:
                    yield flag(lease.get("id"), "image-ready", _not_there(gap, "starts", when(start), image))
            # A run the lease went on from (suspended at its end) is not where a requeue began, even when a later
            # requeue lost its work too (every run before it is then marked requeued).
            end = seconds(r.get("end"))
            fresh = r.get("outcome") == "requeued" and not any(
                x.get("kind") == "suspend" and seconds(x.get("start")) == end for x in resvs)
            if fresh:
                disk.clear()
            else:
                for vnode, node in (r.get("mapping") or {}).items():
                    disk[str(vnode)] = [(start, str(node))]   # the copy it runs from


def _first_without(r: dict, start: int, in_cache, copied) -> tuple[str, str] | None:
    """The first (vnode, node) of reservation r whose node has no copy of the image at `start`: neither one that
    `copied(vnode, node)` says reached it nor one in its cache."""
    for vnode, node in sorted((r.get("mapping") or {}).items()):
        vnode, node = str(vnode), str(node)
        if not (copied(vnode, node) or in_cache(node, start)):
            return vnode, node
    return None


def _not_there(gap: tuple[str, str], verb: str, at: str, image: dict) -> str:
    return f"vnode {gap[0]} {verb} on node {gap[1]} at {at} before image {image.get('id')} is there"
