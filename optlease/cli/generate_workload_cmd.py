"""`optlease generate-workload`: a synthetic LWF workload with its site, and a configuration that runs it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from optlease.cli.app import app
from optlease.errors import InputError

MAX_ARG = 4096  # characters of one notation argument


def parse_amounts(text: str, option: str) -> dict[str, int]:
    """`CPU:100 Memory:1024` (spaces or commas) as type -> positive whole amount."""
    if len(text) > MAX_ARG:
        raise InputError("too long", option)
    amounts: dict[str, int] = {}
    for item in text.replace(",", " ").split():
        name, sep, amount = item.partition(":")
        if not sep or not name or not amount.isdigit() or int(amount) <= 0:
            raise InputError(f"{item[:40]!r} is not TYPE:AMOUNT with a positive whole amount", option)
        amounts[name] = int(amount)
    if not amounts:
        raise InputError("no TYPE:AMOUNT given", option)
    return amounts


def parse_node_set(text: str) -> tuple[int, dict[str, int]]:
    """`16 CPU:100 Memory:1024`: a count of nodes and the capacity of each (Haizea's resources notation)."""
    count, _, rest = text.strip().partition(" ")
    if not count.isdigit() or int(count) <= 0:
        raise InputError(f"{text[:40]!r} does not start with a positive number of nodes", "--nodes")
    return int(count), parse_amounts(rest, "--nodes")


def parse_seconds(text: str, option: str) -> int:
    """Whole seconds, or Haizea's [D:]HH:MM:SS."""
    from optlease.formats.timefmt import parse_duration

    if text.strip().isdigit():
        return int(text)
    try:
        return parse_duration(text[:64])
    except ValueError as exc:
        raise InputError(f"{exc} (or give whole seconds)", option) from None


@app.command("generate-workload")
def generate_workload(
    out: Annotated[Path, typer.Option("-o", "--out", help="The LWF file to write (with a <site>).")],
    nodes: Annotated[list[str], typer.Option("--nodes", help="A node set: 'COUNT TYPE:AMOUNT ...', e.g. '16 "
                                             "CPU:100 Memory:1024'. Repeat for a heterogeneous site.")],
    load: Annotated[float, typer.Option("--load", help="Offered load: the CPU time the leases really use over "
                                        "the site's CPU during the horizon.")],
    vm: Annotated[Optional[list[str]], typer.Option("--vm", help="A VM shape 'TYPE:AMOUNT ...'; repeat for "
                                                    "several (each lease takes one at random).")] = None,
    horizon: Annotated[str, typer.Option("--horizon", help="Arrivals fall in [0, horizon): seconds or "
                                         "[D:]HH:MM:SS.")] = "24:00:00",
    ar_share: Annotated[float, typer.Option("--ar-share", help="Share of the leases that are ARs.")] = 0.0,
    ar_notice: Annotated[str, typer.Option("--ar-notice", help="Mean time between an AR's request and its "
                                           "start: seconds or [D:]HH:MM:SS.")] = "01:00:00",
    immediate_share: Annotated[float, typer.Option("--immediate-share", help="Share of immediate "
                                                   "leases.")] = 0.0,
    overestimate: Annotated[float, typer.Option("--overestimate", help="Largest factor by which users "
                                                "overestimate run time.")] = 1.0,
    premature_share: Annotated[float, typer.Option("--premature-share", help="Share of leases that overestimate "
                                                   "(and so end before their requested time).")] = 0.0,
    not_preemptible: Annotated[bool, typer.Option("--not-preemptible", help="Best-effort leases may not be "
                                                  "preempted.")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random draws: the same seed, the same "
                                      "workload.")] = 0,
    max_leases: Annotated[int, typer.Option("--max-leases", help="Refuse to write more leases than "
                                            "this.")] = 100_000,
    conf: Annotated[Optional[Path], typer.Option("--conf", help="Also write a configuration that simulates the "
                                                 "workload on its site.")] = None,
) -> None:
    """Generate a workload: Lublin-Feitelson widths and run times at an offered load, with ARs, immediate leases,
    overestimated run times and premature ends; deterministic for a seed."""
    from optlease.formats.lwf_write import dump_lwf
    from optlease.workload.generate import WorkloadSpec, configuration, generate

    spec = WorkloadSpec(
        node_sets=tuple(parse_node_set(text) for text in nodes),
        vms=tuple(parse_amounts(text, "--vm") for text in vm) if vm else ({"CPU": 100, "Memory": 1024},),
        load=load, horizon=parse_seconds(horizon, "--horizon"), ar_share=ar_share,
        ar_notice=parse_seconds(ar_notice, "--ar-notice"), immediate_share=immediate_share,
        overestimate=overestimate, premature_share=premature_share, preemptible=not not_preemptible, seed=seed,
        max_leases=max_leases)
    workload = generate(spec)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(dump_lwf(workload))
    if conf is not None:
        conf.parent.mkdir(parents=True, exist_ok=True)
        # the trace named relative to the configuration, so that the two files move together
        conf.write_text(configuration(os.path.relpath(out.resolve(), conf.resolve().parent)))
    print(workload.description)
