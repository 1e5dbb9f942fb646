"""Entry point: runs the typer app and turns every expected failure into one line on stderr and a non-zero exit.

`list-leases` in its common forms runs without importing typer (`optlease.cli.listing.fast_main`): on a
100,000-lease daemon the CLI's imports would otherwise cost as much as the listing."""
from __future__ import annotations

import sys


def fail(message: str, code: int = 2) -> int:
    print(f"optlease: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["list-leases"]:
        from optlease.cli.listing import fast_main

        code = fast_main(args[1:])
        if code is not None:
            return code
    return _typer_main(args)


def load_commands():
    """The typer app with every command registered (each command module registers its commands when imported)."""
    from optlease.cli.app import app
    from optlease.cli import (simulate_cmd, agent_cmd, check_cmd, convert_cmd, optimize_cmd,  # noqa: F401
                              serve_cmd, lease_cmds, convert_data_cmd, generate_workload_cmd, experiments_cmd,
                              report_cmd, compare_cmd, glue_cmd)
    return app


def _typer_main(args: list[str]) -> int:
    import typer

    from optlease.errors import InputError

    app = load_commands()
    try:
        result = app(args=args, prog_name="optlease", standalone_mode=False)
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
