"""The CLI starts without loading what only some commands need: a simulation's wall time includes the start-up of
`optlease`, and every command module is imported to register its command."""
from __future__ import annotations

import json
import subprocess
import sys

# Loaded by the commands that use them (the agent, the daemon's enactment, data files, CP-SAT, reports, grids),
# never by `import optlease.cli.main`.
HEAVY = ("libvirt", "paho", "yaml", "pyarrow", "ortools", "matplotlib", "pandas", "numpy", "dask", "lxml",
         "pyomo", "highspy", "rich")


def loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json\n"
                          "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"],
                         capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def test_cli_import_loads_no_heavy_package():
    assert loaded_after("import optlease.cli.main; optlease.cli.main.load_commands()") & set(HEAVY) == set()


def test_list_leases_starts_without_typer():
    """`optlease list-leases` in its common forms runs before the rest of the CLI is imported."""
    loaded = loaded_after("import optlease.cli.main, optlease.cli.listing")
    assert loaded & {"typer", "click", "rich", "lxml"} == set()


def test_simulation_path_loads_no_heavy_package():
    """What `optlease simulate` needs to run a simulation: the engine, the formats it reads, the accounting."""
    loaded = loaded_after("import optlease.cli.main, optlease.engine.run, optlease.formats.config, "
                          "optlease.accounting.metrics; optlease.cli.main.load_commands()")
    assert loaded & (set(HEAVY) - {"lxml"}) == set()


def test_agent_default_names_are_the_agents():
    """The CLI writes out the agent's default `--adopt` pattern rather than import the agent's package."""
    from optlease.cli.agent_cmd import OPTLEASE_NAMES as cli_default
    from optlease.enact.agent.owned import OPTLEASE_NAMES

    assert cli_default == OPTLEASE_NAMES
