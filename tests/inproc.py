"""`optlease ARGS...` in this process: the same entry point as the installed command (one line on stderr and a
non-zero code for bad input), without a new interpreter per call, for tests that try many arguments."""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from subprocess import CompletedProcess

from optlease.cli.main import main


def optlease(*args: str | Path, cwd: Path | None = None) -> CompletedProcess:
    out, err = io.StringIO(), io.StringIO()
    old = Path.cwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
    finally:
        os.chdir(old)
    return CompletedProcess(["optlease", *map(str, args)], code, out.getvalue(), err.getvalue())
