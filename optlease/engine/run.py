"""Builds one simulation from a Haizea configuration (trace, site, trace overheads, options) and runs it."""
from __future__ import annotations

import contextlib
import dataclasses
import math
from pathlib import Path
from typing import Callable, TextIO

from optlease.accounting.probes import collection_for
from optlease.accounting.rundata import record_rounds
from optlease.domain.lease import DiskImage, LeaseKind, LeaseRequest
from optlease.domain.site import Site
from optlease.eventlog import EventLog
from optlease.engine.simulator import SimulationResult, Simulator, kinds_breakdown
from optlease.errors import InputError
from optlease.formats.config import Config
from optlease.formats.lwf import MAX_AMOUNT, Workload
from optlease.formats.site_source import site_from_resources
from optlease.numbers import parse_whole
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.round_gc import young_only


def load_workload(cfg: Config, tracefile: str | None = None,
                  injection: str | None = None) -> tuple[str, Workload]:
    """The trace named by the configuration (or given instead), with the injection file (the configuration's, or
    the one given instead) merged in."""
    from optlease.formats.traces import inject, load_trace

    name = tracefile or cfg.get("tracefile", "tracefile")
    if name is None:
        raise InputError("no trace file: give --tracefile or set [tracefile] tracefile", cfg.path)
    origin = cfg.get("simulation", "starttime")
    swf = dict(queues=set(cfg.get("tracefile", "swf-queues")) if cfg.get("tracefile", "swf-queues") else None,
               scale=cfg.get("tracefile", "swf-processor-scale"), memory=cfg.get("tracefile", "swf-memory"))
    path = Path(name) if tracefile else cfg.resolve(name)
    workload = load_trace(path, format=cfg.get("tracefile", "format"), origin=origin, **swf)
    if injection:
        workload = inject(workload, load_trace(Path(injection), origin=origin))
    elif cfg.get("tracefile", "injectionfile"):
        workload = inject(workload, load_trace(cfg.resolve(cfg.get("tracefile", "injectionfile")), origin=origin))
    return name, workload


MAX_IMAGEFILE_LINE = 4096      # bytes: a line holds an image name and maybe a size; a longer one is not an image file
MAX_IMAGE_NAMES = 100_000      # distinct images in the first part: a repository's catalogue, not a memory sink


def read_imagefile(path: Path, wanted: int | None = None) -> list[DiskImage]:
    """Haizea's image file: `name size` lines (size in MB, as a trace's image sizes: 1 to MAX_AMOUNT), a `#` line,
    then one image name per request, in order. Reading stops once `wanted` requests have their image: later lines
    name images no request takes, and a huge file then costs no more than the trace it goes with."""
    sizes: dict[str, int] = {}
    sequence: list[DiskImage] = []
    in_sequence = False
    try:
        with open(path, "rb") as f:
            number = 0
            while wanted is None or len(sequence) < wanted:
                raw = f.readline(MAX_IMAGEFILE_LINE + 1)
                if not raw:
                    break
                number += 1
                where = f"{path}:{number}"
                if len(raw) > MAX_IMAGEFILE_LINE:
                    raise InputError(f"a line longer than {MAX_IMAGEFILE_LINE} bytes", where)
                try:
                    text = raw.decode("utf-8").strip()
                except UnicodeDecodeError:
                    raise InputError("not UTF-8 text", where) from None
                if not text:
                    continue
                if text.startswith("#"):
                    in_sequence = True
                elif not in_sequence:
                    name, size = _image_line(text, where)
                    if sizes.get(name, size) != size:
                        raise InputError(f"image {name!r} was given {sizes[name]} MB on an earlier line", where)
                    if name not in sizes and len(sizes) >= MAX_IMAGE_NAMES:
                        raise InputError(f"more than {MAX_IMAGE_NAMES:,} distinct images", where)
                    sizes[name] = size
                elif text not in sizes:
                    raise InputError(f"image {text!r} has no size in the first part of the file", where)
                else:
                    sequence.append(DiskImage(text, sizes[text]))
    except OSError as exc:
        raise InputError(exc.strerror or str(exc), str(path)) from None
    return sequence


def _image_line(text: str, where: str) -> tuple[str, int]:
    parts = text.split()
    if len(parts) != 2:
        raise InputError("expected `image-name size-in-MB`", where)
    try:
        return parts[0], parse_whole(parts[1], 1, MAX_AMOUNT)
    except ValueError as exc:
        raise InputError(f"image {parts[0]!r}: size {exc}", where) from None


def apply_trace_options(cfg: Config, requests: list[LeaseRequest]) -> list[LeaseRequest]:
    """[tracefile] imagefile, runtime-slowdown-overhead, add-overhead, bootshutdown-overhead, override-memory."""
    imagefile = cfg.get("tracefile", "imagefile")
    if imagefile:
        images = read_imagefile(cfg.resolve(imagefile), wanted=len(requests))
        requests = [dataclasses.replace(req, software=image) if image else req
                    for req, image in zip(requests, images + [None] * (len(requests) - len(images)))]
    add = cfg.get("tracefile", "add-overhead")
    slowdown = cfg.get("tracefile", "runtime-slowdown-overhead")
    boot = cfg.get("tracefile", "bootshutdown-overhead") or 0
    memory = cfg.get("tracefile", "override-memory")
    out = []
    for req in requests:
        if add == "all" or (add == "besteffort" and req.kind is LeaseKind.BEST_EFFORT):
            factor = 1 + (slowdown or 0) / 100
            real = req.real_duration
            req = dataclasses.replace(
                req, duration=math.ceil(req.duration * factor - 1e-6) + boot,
                real_duration=None if real is None else math.ceil(real * factor - 1e-6) + boot)
        if memory != -1:
            req = dataclasses.replace(req, vms=tuple({**vm, "Memory": memory} for vm in req.vms))
        out.append(req)
    return out


def site_of(cfg: Config, workload: Workload) -> Site:
    resources = cfg.get("simulation", "resources")
    if resources == "in-tracefile":
        if workload.site is None:
            raise InputError("[simulation] resources is in-tracefile, but the trace has no <site>", cfg.path)
        return workload.site
    return site_from_resources(resources, cfg.path, cfg.resolve)


def check_demands(site: Site, requests: list[LeaseRequest]) -> None:
    known = set(site.resource_types)
    for req in requests:
        one = req.alike()
        for vm in req.vms if one is None else (one,):     # (VMs alike: asked once)
            if known.issuperset(vm):    # (what nearly every VM asks: no list built)
                continue
            unknown = [r for r in vm if r not in site.resource_types]
            if unknown:
                raise InputError(f"lease {req.id} asks for resource type {unknown[0]!r}, which the site does not "
                                 f"have (site types: {' '.join(site.resource_types)})",
                                 req.extra.get("source"))


def simulate(cfg: Config, tracefile: str | None = None, out: TextIO | None = None, injection: str | None = None,
             progress: Callable[[int, int], None] | None = None,
             observe: Callable[[int, object], None] | None = None) -> SimulationResult:
    """Run the configuration's simulation; the result carries the probes' data (`[accounting] probes`), stopped,
    with the CP-SAT rounds' counters under `mapper: cpsat`. `progress` is told (requests arrived, in all); `observe`
    is shown (instant, scheduler) after each instant's step."""
    if cfg.get("general", "mode") != "simulated" or cfg.get("simulation", "clock") != "simulated":
        raise InputError("optlease simulate needs [general] mode: simulated and [simulation] clock: simulated "
                         "(a real clock is the daemon's: optlease serve)", cfg.path)
    origin = cfg.get("simulation", "starttime")
    log = EventLog(origin, cfg.get("general", "loglevel"), out)
    opts = SchedulingOptions.from_config(cfg)
    policies = Policies(opts.policy_admission, opts.policy_preemption, opts.policy_host_selection)
    accounting = collection_for(cfg.get("accounting", "probes").split())
    name, workload = load_workload(cfg, tracefile, injection)
    requests = apply_trace_options(cfg, workload.requests)
    site = site_of(cfg, workload)
    check_demands(site, requests)
    log.status("RM", "Starting resource manager")
    log.info("TFILE", f"Loading tracefile {name}")
    log.info("TFILE", f"Loaded workload with {len(requests)} requests "
                      f"({kinds_breakdown([r.kind for r in sorted(requests, key=lambda r: r.id)])})")
    # the collector walks what the run makes, not the workload read before it (a wide lease's request holds a
    # demand per VM), alive to the end: round_gc (a collection of the oldest generation walked it all again at
    # each collection as the run's state grew). Not with CP-SAT rounds: each round keeps the collector off the
    # whole state as it stands then, the run's own included, which a freeze held from the start would prevent
    with young_only() if opts.mapper == "greedy" else contextlib.nullcontext():
        sim = Simulator(site, requests, opts, policies, log, cfg.get("simulation", "stop-when"),
                        cfg.get("simulation", "status-message-interval"), accounting, progress, observe)
        result = sim.run()
    if sim.stepper.planner.name != "greedy":
        result.round_records = list(sim.stepper.planner.records)
        result.admissions = list(sim.stepper.planner.admissions)
    record_rounds(accounting, result.round_records)
    log.status("RM", "Stopping resource manager gracefully...")
    sim.print_status()
    result.notes.extend(f"lease {lease.id} rejected: {lease.reason}" for lease in result.leases if lease.reason)
    return result
