"""`optlease glue`: the lease manager as a GLUE 1.1 Computing Element (LDIF for a BDII, or XML), from a running
daemon (`-s SERVER`) or from a configuration's simulation at a chosen instant (`-c CONF --at TIME`)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from optlease.cli.app import app
from optlease.cli.lease_cmds import DEFAULT_SERVER, call
from optlease.errors import InputError


@app.command()
def glue(
    server: Annotated[str, typer.Option("-s", "--server", help="URL of the optlease XML-RPC server.",
                                        envvar="OPTLEASE_SERVER")] = DEFAULT_SERVER,
    fmt: Annotated[str, typer.Option("--format", help="ldif (GLUE 1.x LDAP, as a BDII's GIP provider prints) "
                                     "or xml.")] = "ldif",
    conf: Annotated[Optional[Path], typer.Option("-c", "--conf", help="Publish a simulation of this "
                                                 "configuration instead of a daemon.")] = None,
    at: Annotated[Optional[str], typer.Option("--at", help="With -c: the instant, as a time after the "
                                              "simulation's start (01:30:00).")] = None,
) -> None:
    """Print the lease manager as a GLUE Computing Element: Info, State (jobs, free CPUs, response times from the
    plan), Policy, and its Cluster and SubClusters."""
    if fmt not in ("ldif", "xml"):
        raise InputError(f"--format {fmt[:30]!r}: expected ldif or xml")
    if conf is None:
        if at is not None:
            raise InputError("--at is for a simulation (-c CONF); a daemon is published as it is now")
        print(call(server, "get_glue", fmt), end="")
        return
    from optlease.engine.grid_state import ce_in_simulation
    from optlease.formats.config import load_config
    from optlease.formats.glue_ce import write_ldif, write_xml
    from optlease.formats.timefmt import TimeFormatError, parse_duration

    if at is None:
        raise InputError("-c CONF needs --at TIME: the instant of the simulation to publish")
    try:
        instant = parse_duration(at)
    except TimeFormatError as exc:
        raise InputError(f"--at {at[:30]!r}: {exc}") from None
    try:
        ce, site = ce_in_simulation(load_config(conf), instant)
    except ValueError as exc:
        raise InputError(f"--at {at}: {exc}") from None
    sys.stdout.write((write_ldif if fmt == "ldif" else write_xml)(ce, site))
