"""`optlease convert`: SWF traces and old text LWF files rewritten as LWF XML (Haizea's swf2lwf and lwf2xml)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from optlease.cli.app import app
from optlease.errors import InputError

if TYPE_CHECKING:   # the readers and writers load with the command that uses them, not with every command
    from optlease.domain.site import Site
    from optlease.formats.lwf import Workload

convert_app = typer.Typer(no_args_is_help=True, help="Convert trace files to LWF XML, as Haizea's converters do.")
app.add_typer(convert_app, name="convert")

InPath = Annotated[Path, typer.Argument(help="The file to convert.", show_default=False)]
OutPath = Annotated[Optional[Path], typer.Option("-o", "--out", help="Where to write the LWF XML (default: stdout).")]
SiteOpt = Annotated[Optional[str], typer.Option(
    "--site", help="Add a <site> to the LWF, in Haizea's resources notation, e.g. '144 CPU:100 Memory:1024'.")]


def parse_queues(text: str | None) -> set[int] | None:
    """`1,2,3,4` as a set of queue numbers."""
    if text is None:
        return None
    try:
        queues = {int(q) for q in text.replace(" ", "").split(",") if q}
    except ValueError:
        raise InputError(f"{text!r} is not a comma-separated list of queue numbers", "--queues") from None
    if not queues:
        raise InputError("no queue numbers given", "--queues")
    return queues


def parse_site(text: str | None) -> Site | None:
    from optlease.domain.site import Site

    if text is None:
        return None
    try:
        return Site.parse_resources(text)
    except InputError as exc:
        raise exc.located("--site") from None


def write_workload(workload: Workload, out: Path | None, site: Site | None, description: str) -> None:
    """Write the workload as LWF XML to `out`, or to stdout."""
    from optlease.formats.lwf_write import dump_lwf

    if site is not None:
        workload.site = site
    workload.description = description
    data = dump_lwf(workload)
    if out is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    try:
        out.write_bytes(data)
    except OSError as exc:
        raise InputError(exc.strerror or str(exc), str(out)) from None


@convert_app.command("swf2lwf")
def swf2lwf(
    source: InPath,
    out: OutPath = None,
    queues: Annotated[Optional[str], typer.Option(
        "--queues", help="Keep only the jobs of these queues (SWF field 15), e.g. 1,2,3,4.")] = None,
    scale: Annotated[float, typer.Option("--scale", help="Divide the processors of each job by this.")] = 1.0,
    memory: Annotated[int, typer.Option("--memory", help="Memory of each VM, in MB.")] = 1024,
    cpu: Annotated[int, typer.Option("--cpu", help="CPU of each VM (100 = one CPU).")] = 100,
    non_preemptible: Annotated[bool, typer.Option(
        "--non-preemptible", help="Make the leases non-preemptible (they are preemptible by default).")] = False,
    site: SiteOpt = None,
) -> None:
    """Convert an SWF trace (Parallel Workloads Archive) to LWF XML: one best-effort lease per job."""
    for name, value in (("--scale", scale), ("--memory", memory), ("--cpu", cpu)):
        if not value > 0:
            raise InputError(f"must be positive, not {value}", name)
    from optlease.formats.swf import load_swf

    the_site = parse_site(site)
    workload = load_swf(source, queues=parse_queues(queues), scale=scale, memory=memory, cpu=cpu,
                        preemptible=not non_preemptible)
    write_workload(workload, out, the_site, f"Converted by optlease convert swf2lwf from {source.name}")


@convert_app.command("lwf2xml")
def lwf2xml(
    source: InPath,
    out: OutPath = None,
    cpu_unit: Annotated[int, typer.Option("--cpu-unit", help="CPU amount of one CPU of the text file.")] = 100,
    site: SiteOpt = None,
) -> None:
    """Convert an old one-line-per-request text LWF (Haizea's AR injection files) to LWF XML."""
    if cpu_unit <= 0:
        raise InputError(f"must be positive, not {cpu_unit}", "--cpu-unit")
    from optlease.formats.lwf_text import load_text_lwf

    the_site = parse_site(site)
    workload = load_text_lwf(source, cpu_unit=cpu_unit)
    write_workload(workload, out, the_site, f"Converted by optlease convert lwf2xml from {source.name}")
