"""Entry point: runs the typer app and turns every expected failure into one line on stderr and a non-zero exit."""
from __future__ import annotations

import sys

import typer

from optlease.cli.app import app
from optlease.errors import InputError

# Each command module registers its commands on `app` when imported.
from optlease.cli import simulate_cmd  # noqa: E402,F401
from optlease.cli import agent_cmd  # noqa: E402,F401
from optlease.cli import check_cmd  # noqa: E402,F401
from optlease.cli import convert_cmd  # noqa: E402,F401
from optlease.cli import optimize_cmd  # noqa: E402,F401
from optlease.cli import serve_cmd  # noqa: E402,F401
from optlease.cli import lease_cmds  # noqa: E402,F401
from optlease.cli import convert_data_cmd  # noqa: E402,F401
from optlease.cli import generate_workload_cmd  # noqa: E402,F401
from optlease.cli import experiments_cmd  # noqa: E402,F401
from optlease.cli import report_cmd  # noqa: E402,F401
from optlease.cli import compare_cmd  # noqa: E402,F401
from optlease.cli import glue_cmd  # noqa: E402,F401


def fail(message: str, code: int = 2) -> int:
    print(f"optlease: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    try:
        result = app(args=argv, prog_name="optlease", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        return fail("aborted", 1)
    except InputError as exc:
        return fail(str(exc))
    except OSError as exc:
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        return fail(f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    except Exception as exc:
        # Usage errors (unknown option, missing argument) come from typer's bundled click.
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            return fail(exc.format_message().replace("\n", " "), 2)
        raise
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
