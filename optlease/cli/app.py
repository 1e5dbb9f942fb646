"""The typer application every command module registers itself on."""
from __future__ import annotations

import typer

app = typer.Typer(
    name="optlease",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="optlease: a lease manager for clusters of virtual machines (advance reservations, best-effort and "
         "immediate leases), with Haizea's model and a CP-SAT scheduler.",
)
