"""SWF traces (the Parallel Workloads Archive's Standard Workload Format) read as best-effort leases, as Haizea does.

The rules are those of Haizea's `haizea-swf2lwf` and its SWF loader:

- lines starting with `;` are comments, blank lines are skipped; every other line has 18 numeric fields;
- a job cancelled while it was queued (status 5 with a run time <= 0) is skipped, and so is any job whose run
  time is unknown (< 0); with a queue filter, jobs of other queues (field 15) are skipped;
- nodes (VMs) = requested processors (field 8), or allocated processors (field 5) when that is missing (-1),
  divided by `scale` (whole part, at least 1); a job with neither count is skipped;
- duration = requested time (field 9), or the run time when that is missing; real duration = run time (field 4),
  0 -> 1 (SWF rounds runs under half a second down to 0), capped at the duration;
- arrival = submit time (field 2) as it is in the file: the SWF epoch is the workload start;
- fractional seconds are rounded up (SWF allows them in time fields), as everywhere in optlease.

On the SDSC Blue Horizon subsets Haizea ships these rules keep 5,108 of the 5,545 jobs of `30days.swf` and 951 of
the 1,000 of `1000requests.swf`: in those files every job with a negative run time is a cancelled one (status 5)
and no job has a run time of 0, so the two skip rules remove the same 437 (49) jobs. Skipping every status-5 job
instead would keep only 4,192 (859); the cancelled jobs that did run are part of the workload.

Each VM demands `CPU: cpu` and `Memory: memory`. Lease ids are 1..n in file order; the job number is kept in
`extra["trace-id"]` and the line in `extra["source"]`. How many jobs each rule skipped is listed in `notes`.
"""
from __future__ import annotations

import math
from pathlib import Path

from optlease.domain.lease import LeaseKind, LeaseRequest, check_vm_count
from optlease.errors import InputError
from optlease.formats.lwf import Workload
from optlease.formats.timefmt import MAX_SECONDS

# The 18 SWF fields, in order (1-based in every message, as the SWF documentation numbers them).
FIELDS = (
    "job number", "submit time", "wait time", "run time", "allocated processors", "average CPU time",
    "used memory", "requested processors", "requested time", "requested memory", "status", "user id",
    "group id", "executable number", "queue number", "partition number", "preceding job number",
    "think time",
)
JOB, SUBMIT, WAIT, RUN, ALLOC, _CPU, _MEM, REQ_PROCS, REQ_TIME, _REQ_MEM, STATUS, USER = range(12)
QUEUE = 14
CANCELLED = 5


def _numbers(tokens: list[str], where: str) -> list[float]:
    if len(tokens) != len(FIELDS):
        raise InputError(f"SWF line has {len(tokens)} fields, expected {len(FIELDS)}", where)
    try:
        values = list(map(float, tokens))
    except ValueError:
        values = [math.nan]
    if all(map(math.isfinite, values)):
        return values   # (every line of a sound file: one conversion each; the others are named field by field)
    values = []
    for i, token in enumerate(tokens):
        try:
            value = float(token)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise InputError(f"field {i + 1} ({FIELDS[i]}) is {token!r}, not a number", where)
        values.append(value)
    return values


def _seconds(value: float, where: str) -> int:
    if value > MAX_SECONDS:
        raise InputError(f"{_token(value)} seconds is more than 100 years", where)
    return math.ceil(value - 1e-9)


def _token(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def _text(token: str, value: float) -> str:
    """`_token(value)` for the field `token` gave: the token itself where it is a whole number as written (digits,
    no leading zero, short enough for a float to hold exactly)."""
    if token.isdigit() and len(token) < 16 and (token[0] != "0" or len(token) == 1):
        return token
    return _token(value)


def parse_swf(text: str, path: str = "<swf>", *, queues: set[int] | None = None, scale: float = 1.0,
              memory: int = 1024, cpu: int = 100, preemptible: bool = True) -> Workload:
    """The jobs of an SWF text as best-effort lease requests (see the module docstring for the rules)."""
    if not scale > 0 or not math.isfinite(scale):
        raise InputError(f"scale must be a positive number, not {scale}", path)
    if memory <= 0 or cpu <= 0:
        raise InputError(f"per-VM CPU and memory must be positive, not CPU {cpu} and memory {memory}", path)
    skipped = {"cancelled while queued": 0, "unknown run time": 0, "other queues": 0,
               "unknown processor count": 0}
    requests: list[LeaseRequest] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith(";"):
            continue
        where = f"{path}:{lineno}"
        tokens = stripped.split()
        f = _numbers(tokens, where)
        if f[SUBMIT] < 0:
            raise InputError(f"field 2 (submit time) is {_token(f[SUBMIT])}, a submit time cannot be negative",
                             where)
        if f[STATUS] == CANCELLED and f[RUN] <= 0:
            skipped["cancelled while queued"] += 1
            continue
        if f[RUN] < 0:
            skipped["unknown run time"] += 1
            continue
        if queues is not None and int(f[QUEUE]) not in queues:
            skipped["other queues"] += 1
            continue
        processors = f[REQ_PROCS] if f[REQ_PROCS] > 0 else f[ALLOC]
        if processors <= 0:
            skipped["unknown processor count"] += 1
            continue
        nodes = max(1, int(processors / scale))
        if check_vm_count(nodes):
            raise InputError(check_vm_count(nodes), where)
        run = max(1, _seconds(f[RUN], where))
        duration = _seconds(f[REQ_TIME], where) if f[REQ_TIME] > 0 else run
        real = min(run, duration)
        extra = {"trace-id": _text(tokens[JOB], f[JOB]), "source": where, "swf-queue": _text(tokens[QUEUE], f[QUEUE]),
                 "swf-user": _text(tokens[USER], f[USER]), "swf-wait": _text(tokens[WAIT], f[WAIT])}
        # the VMs of a job ask alike: one dict (nothing changes a request's VMs in place)
        requests.append(LeaseRequest(
            id=len(requests) + 1, kind=LeaseKind.BEST_EFFORT, arrival=_seconds(f[SUBMIT], where), duration=duration,
            vms=({"CPU": cpu, "Memory": memory},) * nodes, preemptible=preemptible,
            real_duration=None if real == duration else real, extra=extra))
    # Requests are served in arrival order (SWF files are sorted by submit time already); ties keep file order.
    requests.sort(key=lambda r: r.arrival)
    notes = [f"skipped {n} job{'s' if n != 1 else ''}: {why}" for why, n in skipped.items() if n]
    return Workload(name=Path(path).name, requests=requests, source=path, notes=notes)


def load_swf(path: str | Path, *, queues: set[int] | None = None, scale: float = 1.0, memory: int = 1024,
             cpu: int = 100, preemptible: bool = True) -> Workload:
    """Read an SWF trace file (see `parse_swf`)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(exc.strerror or str(exc), str(path)) from None
    return parse_swf(text, str(path), queues=queues, scale=scale, memory=memory, cpu=cpu, preemptible=preemptible)
