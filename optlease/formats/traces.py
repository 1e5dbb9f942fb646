"""One entry point for trace files: picks the reader (LWF XML, old text LWF, SWF) and merges AR injections.

The format is the one named (`lwf`, `lwf-text`, `swf`, as `[tracefile] format` names it) or, when none is, known by
the file: `.swf` is SWF; `.lwf` or `.xml` whose first non-blank character is `<` is LWF XML; any other `.lwf` is
the old text LWF. A file with another extension is recognised by its content (`<` XML, `;` an SWF comment, `#` a
text-LWF comment, else 18 fields SWF and 10 fields text LWF).
"""
from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path

from optlease.domain.lease import LeaseRequest
from optlease.errors import InputError
from optlease.formats.lwf import Workload, load_lwf
from optlease.formats.lwf_text import FIELDS as TEXT_FIELDS
from optlease.formats.lwf_text import load_text_lwf
from optlease.formats.swf import FIELDS as SWF_FIELDS
from optlease.formats.swf import load_swf

FORMATS = ("lwf", "lwf-text", "swf")
_SNIFF_BYTES = 64 * 1024


def _head(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(_SNIFF_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(exc.strerror or str(exc), str(path)) from None


def detect_format(path: str | Path) -> str:
    """The format of a trace file, by extension and then by content (see the module docstring)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".swf":
        return "swf"
    head = _head(p)
    first = head.lstrip()[:1]
    if suffix in (".lwf", ".xml"):
        return "lwf" if first == "<" or suffix == ".xml" else "lwf-text"
    if first == "<":
        return "lwf"
    if first == ";":
        return "swf"
    if first == "#":
        return "lwf-text"
    line = next((ln for ln in head.splitlines() if ln.strip()), "")
    if len(line.split()) == len(SWF_FIELDS):
        return "swf"
    if len(line.split()) == len(TEXT_FIELDS):
        return "lwf-text"
    raise InputError(f"cannot tell the trace format from the file; name it ({', '.join(FORMATS)})", str(path))


def load_trace(path: str | Path, *, format: str | None = None, origin: datetime | None = None,
               queues: set[int] | None = None, scale: float = 1.0, memory: int = 1024, cpu: int = 100,
               preemptible: bool = True) -> Workload:
    """Read a trace file in any format optlease knows.

    `origin` places ISO times of an LWF XML file; `queues`, `scale`, `memory`, `cpu` and `preemptible` are the
    SWF reader's options; `cpu` is also the CPU amount of one CPU in a text LWF.
    """
    fmt = detect_format(path) if format is None else format.strip().lower()
    if fmt == "lwf":
        return load_lwf(path, origin)
    if fmt == "lwf-text":
        return load_text_lwf(path, cpu_unit=cpu)
    if fmt == "swf":
        return load_swf(path, queues=queues, scale=scale, memory=memory, cpu=cpu, preemptible=preemptible)
    raise InputError(f"unknown trace format {format!r} (allowed: {', '.join(FORMATS)})", str(path))


def _renumbered(request: LeaseRequest, new_id: int, injected: bool) -> LeaseRequest:
    extra = dict(request.extra)
    extra.setdefault("trace-id", str(request.id))
    if injected:
        extra["injected"] = "true"
    return dataclasses.replace(request, id=new_id, extra=extra)


def inject(workload: Workload, injected: Workload) -> Workload:
    """The trace with the injected leases merged in by arrival, ids renumbered 1..n in the merged order.

    The merge is stable: on equal arrivals the trace's leases come first, then the injected ones, each in their own
    order (as Haizea appends the injection to the trace and sorts by submit time). Each lease keeps its original
    trace id and source in `extra`; injected leases are marked `extra["injected"] = "true"`.
    """
    tagged = [(r, False) for r in workload.requests] + [(r, True) for r in injected.requests]
    tagged.sort(key=lambda pair: pair[0].arrival)
    requests = [_renumbered(r, i, inj) for i, (r, inj) in enumerate(tagged, start=1)]
    notes = [*workload.notes, f"injected {len(injected.requests)} leases from {injected.name}",
             *(f"{injected.name}: {note}" for note in injected.notes)]
    return dataclasses.replace(workload, requests=requests, site=workload.site or injected.site, notes=notes)
