"""The scheduling options of one run, typed and taken out of the configuration once (no global config)."""
from __future__ import annotations

from dataclasses import dataclass

from optlease.formats.config import WEIGHT_OPTIONS, Config
from optlease.scheduling.snapshot import Weights

MAX_IN_FUTURE = {"off": 0, "aggressive": 1, "conservative": -1}


@dataclass(frozen=True)
class SchedulingOptions:
    backfilling: str = "aggressive"
    backfilling_reservations: int | None = None
    suspension: str = "all"                 # none | serial-only | all
    suspend_rate: float = 32.0              # MB/s
    resume_rate: float = 32.0
    exclusion: str = "local"                # local | global
    threshold_factor: int = 1
    override_suspend: int | None = None
    override_resume: int | None = None
    force_threshold: int | None = None
    migration: str = "no"                   # no | yes | yes-notransfer
    shutdown_time: int = 0
    enactment_overhead: int = 0
    bandwidth: int = 100                    # Mbit/s, for memory image transfers
    non_schedulable_interval: int = 10
    policy_admission: str = "accept-all"
    policy_preemption: str = "no-preemption"
    policy_host_selection: str = "greedy"
    mapper: str = "greedy"                  # greedy | cpsat (greedy first, then a CP-SAT round over its plan)
    runtime_estimate: str = "requested"     # requested | user-history: how long a best-effort booking holds
    solver_time_limit: float = 1.0          # mapper cpsat: a round's wall-clock budget (s)
    solver_workers: int = 2
    solver_seed: int = 0
    lookahead: int | None = None            # mapper cpsat: seconds after now a start may be planned (None: all)
    solver_neighbourhood: int = 16          # mapper cpsat: nodes offered to a lease beyond its VMs (0: every node)
    solver_stall: float = 0.1               # mapper cpsat: seconds without a better plan after which a round stops
    solver_interval: int = 1800             # mapper cpsat: least simulated seconds between two solved rounds
    solver_commit: int = 0                  # mapper cpsat: a round books only what starts within this (0: all)
    solver_wait_guard: int = 21600          # mapper cpsat: a lease waiting longer is never started later than the
                                            # hint would (0: off)
    solver_work_limit: float = 0.0          # mapper cpsat: deterministic seconds per search, one worker (0: off)
    solver_promise_after: int = 3 * 86400   # mapper cpsat: a round's booking of a lease that waited this long is a
                                            # promise
    solver_promises: int = 0                # mapper cpsat: at most this many at a time, the oldest leases' (0: all)
    solver_promise_resumes: bool = False    # mapper cpsat: a round's resume booking becomes a promise too
    solver_promise_slack: int = 7200        # mapper cpsat: how much later an AR may move a promise in its way
    solver_promise_share: float = 0.05      # mapper cpsat: or this share of the promised lease's wait and run
    solver_promise_stretch: float = 0.07    # mapper cpsat: or, for an AR nothing else places, this share in all
    solver_admit: bool = True               # mapper cpsat: the round model may admit what the greedy pass refused
    solver_suspend: str = "no"              # mapper cpsat: no | for-waiting (a round may suspend running leases)
    weights: Weights = Weights()            # mapper cpsat and optimize: the round objective's weights

    @property
    def max_in_future(self) -> int:
        """How many best-effort leases may hold future reservations (-1: no limit)."""
        if self.backfilling == "intermediate":
            return self.backfilling_reservations or 0
        return MAX_IN_FUTURE[self.backfilling]

    @classmethod
    def from_config(cls, cfg: Config) -> "SchedulingOptions":
        g = lambda opt: cfg.get("scheduling", opt)  # noqa: E731
        return cls(
            backfilling=g("backfilling"), backfilling_reservations=g("backfilling-reservations"),
            suspension=g("suspension"), suspend_rate=g("suspend-rate"), resume_rate=g("resume-rate"),
            exclusion=g("suspendresume-exclusion"), threshold_factor=g("scheduling-threshold-factor"),
            override_suspend=g("override-suspend-time"), override_resume=g("override-resume-time"),
            force_threshold=g("force-scheduling-threshold"), migration=g("migration"),
            shutdown_time=g("shutdown-time"), enactment_overhead=g("enactment-overhead"),
            bandwidth=cfg.get("simulation", "imagetransfer-bandwidth") or 100,
            non_schedulable_interval=g("non-schedulable-interval"),
            policy_admission=g("policy-admission"), policy_preemption=g("policy-preemption"),
            policy_host_selection=g("policy-host-selection"),
            mapper=g("mapper"), runtime_estimate=g("runtime-estimate"),
            solver_time_limit=g("solver-time-limit"), solver_workers=g("solver-workers"),
            solver_seed=g("solver-seed"), lookahead=g("lookahead"), solver_neighbourhood=g("solver-neighbourhood"),
            solver_stall=g("solver-stall"), solver_wait_guard=g("solver-wait-guard"),
            solver_interval=g("solver-interval"), solver_commit=g("solver-commit"),
            solver_work_limit=g("solver-work-limit"), solver_promise_after=g("solver-promise-after"),
            solver_promises=g("solver-promises"), solver_promise_resumes=g("solver-promise-resumes") == "yes",
            solver_promise_slack=g("solver-promise-slack"), solver_promise_share=g("solver-promise-share"),
            solver_promise_stretch=g("solver-promise-stretch"),
            solver_suspend=g("solver-suspend"), solver_admit=g("solver-admit") == "yes",
            weights=_weights(cfg),
        )


def _weights(cfg: Config) -> Weights:
    """The objective's weights: the model's own, with those the configuration sets."""
    given = {field: cfg.get("scheduling", f"weight-{name}") for name, field in WEIGHT_OPTIONS.items()}
    given["aging"] = cfg.get("scheduling", "weight-aging")
    given["slowdown"] = cfg.get("scheduling", "weight-slowdown")
    return Weights(**{field: value for field, value in given.items() if value is not None})
