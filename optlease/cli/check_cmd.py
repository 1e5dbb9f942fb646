"""`optlease check SCHEDULE`: reads a schedule file and reports every rule of the schedule contract it breaks."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from optlease.cli.app import app

if TYPE_CHECKING:
    from optlease.checker_read import Violation


def summary(violations: list[Violation], leases: int, reservations: int) -> str:
    if violations:
        return f"{len(violations)} violation{'' if len(violations) == 1 else 's'}"
    return f"schedule OK: {leases} leases, {reservations} reservations"


@app.command("check")
def check(
    schedule: Annotated[Path, typer.Argument(metavar="SCHEDULE", help="A schedule file (optlease-schedule/1 JSON), "
                                                                     "as `simulate --schedule-out` writes it.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document (violations and counts) "
                                                         "instead of lines.")] = False,
) -> None:
    """Check a schedule file against every rule of the schedule contract: capacity on every node at every instant,
    arrivals, durations, AR and immediate starts, suspension, rejection. Exit 0 when it obeys them all, 1 when it
    breaks some (one line each), 2 when the file cannot be read as a schedule."""
    # imported here: every command of the CLI loads this module, and only `check` needs the checker
    from optlease.checker_stream import check_file

    # read as a stream, a lease at a time: a year of a large site is a file of a few GB
    checked = check_file(schedule)
    violations, leases, reservations = checked.violations, checked.leases, checked.reservations
    if as_json:
        print(json.dumps({"schedule": str(schedule), "ok": not violations, "leases": leases,
                          "reservations": reservations, "violations": [v.as_dict() for v in violations]}, indent=2))
    else:
        for violation in violations:
            print(violation)
        print(summary(violations, leases, reservations))
    if violations:
        raise typer.Exit(1)
