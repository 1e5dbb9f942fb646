"""Haizea's old one-line-per-request text LWF (the format of its AR injection files), read as lease requests.

Each line is `submit start dur realdur nodes cpu mem disk image imagesize`: times in whole seconds from the workload
start, `start` = -1 for a best-effort lease (preemptible) and otherwise the exact start of an AR (not
preemptible); `cpu` is a number of CPUs (each VM demands `cpu * cpu_unit` CPU), `mem` MB of memory per VM; the
image is written quoted (`'NONE.img'`, Python's repr, as Haizea wrote it). `disk` is ignored, as Haizea's
`haizea-lwf2xml` ignores it; an image size of 0 means no disk image. Lines starting with `#` and blank lines are
skipped. A real duration above the duration is capped at it.

An AR may start before its arrival, or even before the workload start (a few of Haizea's injection files have
such requests): it is read as written, and the scheduler rejects it.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from optlease.domain.lease import DiskImage, LeaseKind, LeaseRequest, check_vm_count
from optlease.errors import InputError
from optlease.formats.lwf import MAX_AMOUNT, Workload
from optlease.formats.timefmt import MAX_SECONDS
from optlease.numbers import parse_whole

FIELDS = ("submit", "start", "dur", "realdur", "nodes", "cpu", "mem", "disk", "image", "imagesize")
BEST_EFFORT_START = -1


# Upper bounds, as the XML LWF and SWF readers have them: times and durations within a century, amounts and image
# sizes within 32 bits; a bound's text says it in the refusal.
SECONDS = (MAX_SECONDS, "100 years")
AMOUNT = (MAX_AMOUNT, str(MAX_AMOUNT))


def _int(tokens: list[str], i: int, where: str, minimum: int | None = None,
         maximum: tuple[int, str] | None = None) -> int:
    """Field i, read as optlease reads every number (ASCII digits, optlease.numbers: int() would take `1_0`, `+5`
    or Arabic-Indic digits), between `minimum` and `maximum` when given."""
    token = tokens[i]
    try:
        value = parse_whole(token, None)
    except ValueError:
        raise InputError(f"field {i + 1} ({FIELDS[i]}) is {token!r}, not a whole number (digits 0-9 only)",
                         where) from None
    if minimum is not None and value < minimum:
        bound = "positive" if minimum == 1 else f"at least {minimum}"
        raise InputError(f"field {i + 1} ({FIELDS[i]}) is {value}, it must be {bound}", where)
    if maximum is not None and abs(value) > maximum[0]:
        raise InputError(f"field {i + 1} ({FIELDS[i]}) is {value}, more than {maximum[1]}", where)
    return value


def _line(line: str, where: str, lease_id: int, cpu_unit: int) -> LeaseRequest:
    try:
        tokens = shlex.split(line)
    except ValueError as exc:
        raise InputError(f"cannot split the line into fields: {exc}", where) from None
    if len(tokens) != len(FIELDS):
        raise InputError(f"text LWF line has {len(tokens)} fields, expected {len(FIELDS)} "
                         f"({' '.join(FIELDS)})", where)
    submit = _int(tokens, 0, where, minimum=0, maximum=SECONDS)
    start = _int(tokens, 1, where, maximum=SECONDS)     # an AR may start before the workload does (docstring)
    duration = _int(tokens, 2, where, minimum=1, maximum=SECONDS)
    real = min(_int(tokens, 3, where, minimum=1, maximum=SECONDS), duration)
    nodes = _int(tokens, 4, where, minimum=1)
    if check_vm_count(nodes):
        raise InputError(check_vm_count(nodes), where)
    cpus = _int(tokens, 5, where, minimum=1, maximum=AMOUNT)
    memory = _int(tokens, 6, where, minimum=1, maximum=AMOUNT)
    _int(tokens, 7, where, minimum=0)
    image = tokens[8]
    image_size = _int(tokens, 9, where, minimum=0, maximum=AMOUNT)
    if image_size and not image:
        raise InputError("field 9 (image) is empty but the image has a size", where)
    best_effort = start == BEST_EFFORT_START
    return LeaseRequest(
        id=lease_id, kind=LeaseKind.BEST_EFFORT if best_effort else LeaseKind.AR, arrival=submit,
        duration=duration, vms=tuple({"CPU": cpus * cpu_unit, "Memory": memory} for _ in range(nodes)),
        preemptible=best_effort, start=None if best_effort else start,
        real_duration=None if real == duration else real,
        software=DiskImage(image, image_size) if image_size else None,
        extra={"trace-id": str(lease_id), "source": where})


def parse_text_lwf(text: str, path: str = "<lwf>", *, cpu_unit: int = 100) -> Workload:
    """The requests of an old-style text LWF, ids 1..n in file order, served in arrival order."""
    if cpu_unit <= 0:
        raise InputError(f"the CPU amount of one CPU must be positive, not {cpu_unit}", path)
    requests: list[LeaseRequest] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        requests.append(_line(stripped, f"{path}:{lineno}", len(requests) + 1, cpu_unit))
    # Ties in arrival keep file order (a stable sort), as in every reader.
    requests.sort(key=lambda r: r.arrival)
    return Workload(name=Path(path).name, requests=requests, source=path)


def load_text_lwf(path: str | Path, *, cpu_unit: int = 100) -> Workload:
    """Read an old-style text LWF file (see `parse_text_lwf`)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(exc.strerror or str(exc), str(path)) from None
    return parse_text_lwf(text, str(path), cpu_unit=cpu_unit)
