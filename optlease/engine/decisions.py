"""What a step's round model decided (`mapper: cpsat`), recorded while the daemon runs and given back on replay.

A CP-SAT round stops on the wall clock, so solving the same round again after a restart may decide otherwise than
what the hosts were told. The round's two time-bounded answers — the hint's completion (`_complete`) and the
solver's plan (`_plan`) — are all that can differ: the daemon journals them with each step, and a replay hands the
recorded answers back in the order the step asks for them, so that the scheduler rebuilds exactly the plan that was
enacted. Answers are JSON (the persistence file is data, never code).
"""
from __future__ import annotations

import json
from dataclasses import asdict

from optlease.scheduling.snapshot import LeasePlan, Outcome, Plan, RoundStats


class Decisions:
    """Wraps one CpsatRound's answers (no round hook, nothing to record: the greedy mapper is deterministic)."""

    def __init__(self, round_hook) -> None:
        self.recorded: list[str] = []          # this step's answers, journaled with it
        self.diverged = 0                      # replayed steps that asked for an answer the journal did not have
        self._replay: list[str] | None = None
        if round_hook is None:
            return
        complete, plan = round_hook._complete, round_hook._plan
        round_hook._complete = lambda now, movable: self._answer("complete", complete, now, movable)
        round_hook._plan = lambda *args: self._answer("plan", plan, *args)

    def begin(self, replay: list[str] | None = None) -> None:
        """A step begins: live (answers are computed and recorded) or replayed (the journaled answers are used)."""
        self.recorded = []
        self._replay = None if replay is None else list(reversed(replay))

    def _answer(self, kind: str, compute, *args):
        if self._replay is not None:
            body = self._replay.pop() if self._replay else None
            got = decode(kind, body) if body is not None else None
            if got is not None:
                self.recorded.append(body)
                return got
            self._replay = []      # out of step with the journal: the rest of this step is solved again
            self.diverged += 1
        out = compute(*args)
        self.recorded.append(encode(kind, out))
        return out


def encode(kind: str, answer) -> str:
    if kind == "complete":
        body = {"kind": kind, "plans": [_plan_json(p) for p in answer.values()]}
    else:
        body = {"kind": kind, "plans": [_plan_json(p) for p in answer.leases],
                "stats": None if answer.stats is None else asdict(answer.stats)}
    return json.dumps(body, separators=(",", ":"))


def decode(kind: str, body: str):
    """The answer a journaled text holds, or None when it is not an answer of this kind."""
    try:
        d = json.loads(body)
        if d.get("kind") != kind:
            return None
        plans = [_plan_from(p) for p in d["plans"]]
        if kind == "complete":
            return {p.lease_id: p for p in plans}
        stats = d.get("stats")
        return Plan(tuple(plans), None if stats is None else RoundStats(**stats))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _plan_json(p: LeasePlan) -> dict:
    d = asdict(p)
    d["outcome"] = p.outcome.value
    return d


def _plan_from(d: dict) -> LeasePlan:
    return LeasePlan(int(d["lease_id"]), Outcome(d["outcome"]), str(d["reason"]), d["start"],
                     tuple(int(n) for n in d["nodes"]), d["end"], d["suspend_at"],
                     tuple(tuple(int(x) for x in m) for m in d["migrations"]))
