"""`optlease check SCHEDULE`: reads a schedule file and reports every rule of the schedule contract it breaks."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from optlease.checker import FORMAT, Violation, check_schedule
from optlease.cli.app import app
from optlease.errors import InputError


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def load_schedule(path: Path) -> dict:
    """The document in a schedule file; InputError, naming the file, when it is not one."""
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", where) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a schedule file", where) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", where) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", where) from None
    try:
        # Python's reader takes NaN and Infinity, which JSON (and every other reader of the file) does not.
        doc = json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        raise InputError(f"line {exc.lineno} column {exc.colno}: {exc.msg}", where) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"not valid JSON: {exc}", where) from None
    if not isinstance(doc, dict):
        raise InputError(f"not a schedule: the document is a JSON {type(doc).__name__}, not an object", where)
    # Any other file with a format key is someone else's document: refuse it rather than list a hundred faults.
    if doc.get("format") != FORMAT:
        raise InputError(f"not a schedule: format is {doc.get('format')!r}, expected {FORMAT!r}", where)
    return doc


def schedule_size(doc: dict) -> tuple[int, int]:
    """(leases, reservations) in a document, counting only what sits where the contract puts it."""
    leases = doc.get("leases")
    if not isinstance(leases, list):
        return 0, 0
    return len(leases), sum(len(x["reservations"]) for x in leases
                            if isinstance(x, dict) and isinstance(x.get("reservations"), list))


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
    doc = load_schedule(schedule)
    violations = check_schedule(doc)
    leases, reservations = schedule_size(doc)
    if as_json:
        print(json.dumps({"schedule": str(schedule), "ok": not violations, "leases": leases,
                          "reservations": reservations, "violations": [v.as_dict() for v in violations]}, indent=2))
    else:
        for violation in violations:
            print(violation)
        print(summary(violations, leases, reservations))
    if violations:
        raise typer.Exit(1)
