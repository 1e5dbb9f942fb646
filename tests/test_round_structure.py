"""The planner structure: one planner per round, picked by name; the greedy scheduler and Haizea's policies know
nothing of CP-SAT; no import circle among the scheduling modules. Read from the source (every import, also those
inside functions), so that a lazy import cannot hide a dependency."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "optlease"
# Haizea's scheduler and its policies: they must plan alone (mapper: greedy) and read no CP-SAT state
GREEDY = ["scheduling/leasesched.py", "scheduling/queuepass.py", "scheduling/resumes.py", "scheduling/preemption.py",
          "scheduling/replan.py", "scheduling/records.py",
          "scheduling/policies.py", "scheduling/vmsched.py", "scheduling/slottable.py", "scheduling/profile.py",
          "scheduling/mapper.py"]
CPSAT_MODULES = ("optlease.scheduling.cpsat", "optlease.scheduling.cpsat_round", "optlease.scheduling.round_commit",
                 "optlease.scheduling.round_hint", "optlease.scheduling.round_snapshot", "optlease.scheduling.mip",
                 "ortools")
CPSAT_WORDS = ("promise", "round_hook", "admission_hook", "cpsat", "solver_")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every optlease (or OR-Tools) module a file imports, anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in out if name.startswith(("optlease", "ortools"))}


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {i for i in imports(path) if i in files} for name, path in files.items()}


@pytest.mark.parametrize("rel", GREEDY)
def test_the_greedy_scheduler_knows_nothing_of_cpsat(rel):
    path = PACKAGE / rel
    bad = {i for i in imports(path) if i.startswith(CPSAT_MODULES)}
    assert bad == set(), f"{rel} imports {sorted(bad)}"
    code = path.read_text().lower()
    assert [w for w in CPSAT_WORDS if w in code] == [], f"{rel} names CP-SAT state"


def find_circle(g: dict[str, set[str]]) -> list[str] | None:
    """An import circle of the graph (a module importing itself, as a worker process's entry, does not count)."""
    seen: dict[str, int] = {}   # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> list[str] | None:
        seen[name] = 1
        for nxt in sorted(g[name] - {name}):
            if seen.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in seen and (found := visit(nxt, path + [nxt])):
                return found
        seen[name] = 2
        return None

    for name in sorted(g):
        if name not in seen and (found := visit(name, [name])):
            return found
    return None


def test_no_import_circle_among_the_scheduling_and_engine_modules():
    """cpsat_round, leasesched and round_commit (and every module of scheduling and engine) import one another one
    way only."""
    within = ("optlease.scheduling", "optlease.engine")
    g = {name: {i for i in deps if i.startswith(within)} for name, deps in graph().items() if name.startswith(within)}
    assert {"optlease.scheduling.cpsat_round", "optlease.scheduling.leasesched",
            "optlease.scheduling.round_commit", "optlease.scheduling.planner"} <= set(g)
    circle = find_circle(g)
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_the_import_check_sees_a_lazy_import_and_a_circle(tmp_path):
    """The checks above can fail: a function-level import is found, and a circle through it is reported."""
    pkg = tmp_path / "optlease"
    pkg.mkdir()
    (pkg / "a.py").write_text("def f():\n    from optlease.b import g\n")
    (pkg / "b.py").write_text("import optlease.a\n")
    assert imports(pkg / "a.py") == {"optlease.b", "optlease.b.g"}
    assert imports(pkg / "b.py") == {"optlease.a"}
    assert find_circle({"optlease.a": {"optlease.b"}, "optlease.b": {"optlease.a"}}) == \
        ["optlease.a", "optlease.b", "optlease.a"]
    assert find_circle({"optlease.a": {"optlease.b", "optlease.a"}, "optlease.b": set()}) is None


def test_the_stepper_holds_the_planner_the_configuration_names():
    """The driver's stepper (simulator and daemon alike) holds one planner, picked from the registry by name."""
    import io
    from datetime import datetime

    from optlease.domain.site import Site
    from optlease.engine.loop import Stepper
    from optlease.eventlog import EventLog
    from optlease.scheduling.leasesched import LeaseScheduler
    from optlease.scheduling.options import SchedulingOptions
    from optlease.scheduling.planner import PLANNERS
    from optlease.scheduling.policies import Policies

    assert sorted(PLANNERS) == ["cpsat", "greedy"]
    for name in PLANNERS:
        sched = LeaseScheduler(Site.homogeneous(2, {"CPU": 100, "Memory": 1024}), SchedulingOptions(mapper=name),
                               Policies(), EventLog(datetime(2020, 1, 1), "INFO", io.StringIO()))
        planner = Stepper(sched).planner
        assert planner.name == name and planner.sched is sched
        assert (sched.on_refusal is None) == (name == "greedy")
