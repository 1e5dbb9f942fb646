"""The comparison table of a report: which run-wide figures it shows, how runs are grouped into columns (profiles, or
runs when there is one profile), and each cell's mean and spread over the group's runs. Pure."""
from __future__ import annotations

from dataclasses import dataclass
from statistics import mean
from typing import Any, Callable, Optional

# A run as the report sees it: its data file's attrs and per-run figures (optlease.accounting.datafile.RunData)
Stats = dict[str, Any]


def _number(stats: Stats, name: str) -> Optional[float]:
    value = stats.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # NaN is "not measured"
        return None
    return float(value)


def _share(accepted: str, rejected: str) -> Callable[[Stats], Optional[float]]:
    """Percent of the requests of one kind that were accepted; none when there were none."""
    def figure(stats: Stats) -> Optional[float]:
        yes, no = _number(stats, accepted), _number(stats, rejected)
        if yes is None or no is None or yes + no == 0:
            return None
        return 100.0 * yes / (yes + no)
    return figure


def _scaled(name: str, factor: float) -> Callable[[Stats], Optional[float]]:
    def figure(stats: Stats) -> Optional[float]:
        value = _number(stats, name)
        return None if value is None else value * factor
    return figure


@dataclass(frozen=True)
class Metric:
    label: str          # the row's title, with its unit
    figure: Callable[[Stats], Optional[float]]   # the run's value from its per-run stats
    digits: int         # decimals shown
    unit: str           # what the bars' axis measures


# optlease's own per-run stat names in a data file (docs/accounting.md), and the offline optimum's bound
ACCEPTED_AR, REJECTED_AR = "accepted_ar", "rejected_ar"
ACCEPTED_IM, REJECTED_IM = "accepted_immediate", "rejected_immediate"
ALL_BE = "best_effort_all_completed_at"
WAIT_AVG, WAIT_MAX = "best_effort_wait_avg", "best_effort_wait_max"
SLOWDOWN = "bounded_slowdown_avg"
UTILIZATION = "cpu_utilization"
PREEMPTIONS, SUSPENSIONS, MIGRATIONS = "preemptions", "suspensions", "migrations"
ROUND_P50, ROUND_P95, GAP = "round_wall_time_p50", "round_wall_time_p95", "round_gap_mean"
OFFLINE_BOUND = "offline_bound"
WALL_TIME = "wall_time"

METRICS: list[Metric] = [
    Metric("AR accepted (%)", _share(ACCEPTED_AR, REJECTED_AR), 1, "percent"),
    Metric("immediate accepted (%)", _share(ACCEPTED_IM, REJECTED_IM), 1, "percent"),
    Metric("all best-effort done (h)", _scaled(ALL_BE, 1 / 3600), 2, "hours"),
    Metric("best-effort wait, mean (s)", _scaled(WAIT_AVG, 1), 1, "seconds"),
    Metric("best-effort wait, max (s)", _scaled(WAIT_MAX, 1), 0, "seconds"),
    Metric("bounded slowdown, mean", _scaled(SLOWDOWN, 1), 2, "ratio"),
    Metric("CPU utilization (%)", _scaled(UTILIZATION, 100), 1, "percent"),
    Metric("preemptions", _scaled(PREEMPTIONS, 1), 1, "count"),
    Metric("suspensions", _scaled(SUSPENSIONS, 1), 1, "count"),
    Metric("migrations", _scaled(MIGRATIONS, 1), 1, "count"),
    Metric("round wall time p50 (s)", _scaled(ROUND_P50, 1), 3, "seconds"),
    Metric("round wall time p95 (s)", _scaled(ROUND_P95, 1), 3, "seconds"),
    Metric("solver gap, mean (%)", _scaled(GAP, 100), 2, "percent"),
    Metric("offline bound (objective)", _scaled(OFFLINE_BOUND, 1), 1, "objective"),
    Metric("wall time of the run (s)", _scaled(WALL_TIME, 1), 2, "seconds"),
]


@dataclass(frozen=True)
class Cell:
    values: tuple[float, ...]      # one per run of the column that measured it

    @property
    def mean(self) -> Optional[float]:
        return mean(self.values) if self.values else None

    @property
    def low(self) -> Optional[float]:
        return min(self.values) if self.values else None

    @property
    def high(self) -> Optional[float]:
        return max(self.values) if self.values else None

    def text(self, digits: int) -> str:
        """`mean`, and `mean (min–max)` over several runs that differ; `-` when no run measured it."""
        if not self.values:
            return "-"
        shown = f"{self.mean:,.{digits}f}"
        if len(self.values) > 1 and self.low != self.high:
            shown += f" ({self.low:,.{digits}f}–{self.high:,.{digits}f})"
        return shown


@dataclass(frozen=True)
class Table:
    columns: list[str]                       # profile names, or run labels when there is one profile
    runs: dict[str, int]                     # column -> how many runs it aggregates
    rows: list[tuple[Metric, list[Cell]]]    # only the metrics some run measured


def run_label(attrs: dict[str, str]) -> str:
    """A run's name in a report: its profile, trace and injection."""
    parts = [attrs.get("profile") or "run", _stem(attrs.get("tracefile", ""))]
    if attrs.get("injectionfile"):
        parts.append(_stem(attrs["injectionfile"]))
    return " / ".join(p for p in parts if p)


def _stem(path: str) -> str:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[0] if "." in name else name


def group_runs(attrs: list[dict[str, str]]) -> dict[str, list[int]]:
    """Column name -> indices of its runs: one column per profile, or per run when all share one profile."""
    profiles: dict[str, list[int]] = {}
    for i, a in enumerate(attrs):
        profiles.setdefault(a.get("profile") or "run", []).append(i)
    if len(profiles) > 1 or len(attrs) == 1:
        return profiles
    columns: dict[str, list[int]] = {}
    for i, a in enumerate(attrs):
        label = run_label(a)
        # two runs of the same profile, trace and injection (say, two configurations' files) stay apart
        while label in columns:
            label += "'"
        columns[label] = [i]
    return columns


def workload(attrs: dict[str, str]) -> tuple[str, str]:
    """What a run ran: its trace and injection."""
    return _stem(attrs.get("tracefile", "")), _stem(attrs.get("injectionfile", ""))


def shared_runs(attrs: list[dict[str, str]], columns: dict[str, list[int]]) -> Optional[dict[str, list[int]]]:
    """The columns cut to the runs of the workloads that every column ran, when the columns ran different sets of
    workloads and still share some (a profile run on 12 injections beside profiles run on 72): their means compare
    like with like. None when every column ran the same workloads, or none in common."""
    if len(columns) < 2:
        return None
    ran = [{workload(attrs[i]) for i in indices} for indices in columns.values()]
    common = set.intersection(*ran)
    if not common or all(r == common for r in ran):
        return None
    return {name: [i for i in indices if workload(attrs[i]) in common] for name, indices in columns.items()}


def build_table(columns: dict[str, list[int]], per_run: list[Stats]) -> Table:
    """Each metric's cells, one per column (`group_runs`, or its cut by `shared_runs`)."""
    rows = []
    for metric in METRICS:
        cells = []
        for indices in columns.values():
            values = [metric.figure(per_run[i]) for i in indices]
            cells.append(Cell(tuple(v for v in values if v is not None)))
        if any(cell.values for cell in cells):
            rows.append((metric, cells))
    return Table(list(columns), {name: len(ix) for name, ix in columns.items()}, rows)


def markdown_table(table: Table) -> str:
    head = ["figure", *(f"{name} ({table.runs[name]} runs)" if table.runs[name] > 1 else name
                        for name in table.columns)]
    lines = ["| " + " | ".join(_escape(h) for h in head) + " |", "|---" * len(head) + "|"]
    for metric, cells in table.rows:
        lines.append("| " + " | ".join([metric.label, *(c.text(metric.digits) for c in cells)]) + " |")
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    return text.replace("|", "\\|")
