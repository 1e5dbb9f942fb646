"""The scheduling options of one run, typed and taken out of the configuration once (no global config)."""
from __future__ import annotations

from dataclasses import dataclass

from optlease.formats.config import Config
from optlease.scheduling.preparation import PreparationOptions
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
    mapper: str = "greedy"                  # the planner of each round (scheduling.planner): greedy | cpsat
    runtime_estimate: str = "requested"     # requested | user-history: how long a best-effort booking holds
    solver_work_limit: float = 0.05         # mapper cpsat: CP-SAT deterministic seconds per search (reproducible)
    solver_time_limit: float = 10.0         # mapper cpsat: a search's wall-clock safety net (s), logged when it fires
    solver_suspend: str = "for-waiting"     # mapper cpsat: no | for-waiting (a round may suspend running leases)
    weights: Weights = Weights()            # mapper cpsat and optimize: the round objective's weights
    preparation: PreparationOptions = PreparationOptions()   # disk images: unmanaged, or sent over a link

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
            solver_work_limit=g("solver-work-limit"), solver_time_limit=g("solver-time-limit"),
            solver_suspend=g("solver-suspend"),
            weights=_weights(cfg),
            preparation=PreparationOptions.from_config(cfg),
        )


def _weights(cfg: Config) -> Weights:
    """The objective's weights: weight-rejected and weight-preemption are given in seconds of waiting of a
    best-effort lease of weight 1, which the model counts `Weights.wait` units each."""
    wait = Weights.wait
    return Weights(rejected=cfg.get("scheduling", "weight-rejected") * wait,
                   preemptions=cfg.get("scheduling", "weight-preemption") * wait)
