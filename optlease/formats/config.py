"""Haizea's configuration file (Appendix B of its manual): every section and option, typed and checked.

The schema below is the single source of truth: names, types, defaults and allowed values. An unknown section or
option, or a bad value, is an InputError naming the file, the section, the option and what is allowed.
"""
from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from optlease.errors import InputError
from optlease.formats.timefmt import TimeFormatError, parse_duration, parse_iso
from optlease.numbers import in_range, parse_decimal, parse_whole

REQUIRED = object()  # marks an option without a default that must be given


@dataclass(frozen=True)
class Option:
    kind: str                       # str | int | float | bool | duration | datetime | choice | policy | intlist
    default: Any = None
    choices: tuple[str, ...] = ()
    positive: bool = False
    # the allowed range, where a value outside it would stall or kill the daemon rather than mean something
    low: float | None = None
    high: float | None = None

    def parse(self, raw: str) -> Any:
        text = raw.strip()
        if self.kind == "str":
            return text
        if self.kind in ("choice", "policy"):
            if text in self.choices or (self.kind == "policy" and "." in text):
                return text
            more = " or a dotted path to a policy class" if self.kind == "policy" else ""
            raise ValueError(f"{text!r} is not one of {', '.join(self.choices)}{more}")
        if self.kind == "bool":
            if text.lower() in ("true", "yes", "1", "on"):
                return True
            if text.lower() in ("false", "no", "0", "off"):
                return False
            raise ValueError(f"{text!r} is not True or False")
        if self.kind == "int":
            value = parse_whole(text, None)
        elif self.kind == "float":
            value = parse_decimal(text, None)
        elif self.kind == "duration":
            value = _seconds(text)
        elif self.kind == "datetime":
            try:
                return parse_iso(text)
            except TimeFormatError as exc:
                raise ValueError(exc.message) from None
        elif self.kind == "intlist":
            return tuple(parse_whole(p) for p in text.replace(",", " ").split())
        else:  # pragma: no cover - schema typo
            raise AssertionError(self.kind)
        if value < 0 or (self.positive and value == 0):
            raise ValueError(f"{text!r} must be {'positive' if self.positive else 'zero or more'}")
        if self.low is not None or self.high is not None:
            in_range(value, self.low or 0, self.high, text)
        return value


def _seconds(text: str) -> int:
    """A duration option: HH:MM:SS as the manual says, or plain seconds as Haizea's own sample files write it."""
    if ":" not in text:
        try:
            return parse_whole(text, None)
        except ValueError:
            raise ValueError(f"{text!r} is not a duration (HH:MM:SS or seconds)") from None
    try:
        return parse_duration(text)
    except TimeFormatError:
        raise ValueError(f"{text!r} is not a duration (HH:MM:SS or seconds)") from None


def O(kind: str, default: Any = None, *choices: str, positive: bool = False, low: float | None = None,
      high: float | None = None) -> Option:
    return Option(kind, default, tuple(choices), positive, low, high)


DAY = 86400
PORT = {"low": 1, "high": 65535}


# [scheduling] options that mapper cpsat no longer reads, and what took their place (a configuration that still sets
# one is refused with this line, so that nobody believes a setting acts that does not)
REMOVED_OPTIONS = {
    **{name: "rounds are bounded by solver-work-limit (deterministic work), solver-time-limit is only a safety net"
       for name in ("solver-stall", "solver-workers", "solver-seed")},
    **{name: "the round derives it (models/cpsat-round.md, settings the round derives)"
       for name in ("lookahead", "solver-neighbourhood", "solver-interval", "solver-wait-guard")},
    "solver-commit": "a round books its whole plan; the next round plans again",
    "solver-admit": "the round model is always offered what the greedy pass refused",
    **{name: "promises are gone: the round model moves bookings and suspends leases for an AR itself"
       for name in ("solver-promise-after", "solver-promises", "solver-promise-resumes", "solver-promise-slack",
                    "solver-promise-share", "solver-promise-stretch")},
    **{f"weight-{name}": "the objective's other weights are fixed (models/cpsat-round.md); weight-rejected and "
       "weight-preemption are in seconds of waiting"
       for name in ("wait", "migration", "overhead", "stability-time", "stability-nodes", "aging", "slowdown")},
}


SCHEMA: dict[str, dict[str, Option]] = {
    "general": {
        "loglevel": O("choice", "INFO", "STATUS", "INFO", "DEBUG", "VDEBUG"),
        "logfile": O("str", None),
        "mode": O("choice", REQUIRED, "simulated", "fast", "opennebula"),
        "lease-preparation": O("choice", "unmanaged", "unmanaged", "imagetransfer"),
        "lease-failure-handling": O("choice", "cancel", "cancel", "exit", "exit-raise"),
        "persistence-file": O("str", "none"),
    },
    "scheduling": {
        "mapper": O("choice", "greedy", "greedy", "cpsat"),
        # how long a best-effort booking holds its VMs: the requested time, or its user's last two runs
        # (models/cpsat-round.md, run-time estimates)
        "runtime-estimate": O("choice", "requested", "requested", "user-history"),
        # mapper cpsat: the five solver options (models/cpsat-round.md, options). The work CP-SAT may do per search,
        # in its deterministic seconds: the same workload gives the same schedule on any machine and under any load
        "solver-work-limit": O("float", 0.05, positive=True),
        # a wall-clock cap per search, only a safety net: when it stops a search first, the run logs it
        "solver-time-limit": O("float", 10.0, positive=True),
        # whether a round may suspend running preemptible leases at once so that waiting leases run first (no: the
        # round suspends only for ARs)
        "solver-suspend": O("choice", "for-waiting", "no", "for-waiting"),
        # mapper cpsat and optimize: what one node-second of a refused AR or immediate lease costs, and what one
        # preemption costs, in seconds of waiting of a best-effort lease of weight 1 (models/cpsat-round.md)
        "weight-rejected": O("int", 1000),
        "weight-preemption": O("int", 5),
        "policy-admission": O("policy", "accept-all", "accept-all", "no-ARs"),
        "policy-preemption": O("policy", "no-preemption", "no-preemption", "ar-preempts-everything"),
        "policy-host-selection": O("policy", "greedy", "no-policy", "greedy"),
        "wakeup-interval": O("duration", 60, positive=True, high=DAY),
        "backfilling": O("choice", "off", "off", "aggressive", "conservative", "intermediate"),
        "backfilling-reservations": O("int", None),
        "suspension": O("choice", REQUIRED, "none", "serial-only", "all"),
        "suspend-rate": O("float", REQUIRED, positive=True),
        "resume-rate": O("float", REQUIRED, positive=True),
        "suspendresume-exclusion": O("choice", "local", "local", "global"),
        "scheduling-threshold-factor": O("int", 1),
        "override-suspend-time": O("int", None),
        "override-resume-time": O("int", None),
        "force-scheduling-threshold": O("duration", None),
        "migration": O("choice", "no", "no", "yes", "yes-notransfer"),
        "non-schedulable-interval": O("duration", 10, high=DAY),
        "shutdown-time": O("duration", 0),
        "enactment-overhead": O("duration", 0),
    },
    "simulation": {
        "clock": O("choice", "real", "real", "simulated"),
        "starttime": O("datetime", None),
        "resources": O("str", REQUIRED),
        "imagetransfer-bandwidth": O("int", REQUIRED, positive=True),
        "stop-when": O("choice", "all-leases-done", "all-leases-done", "besteffort-submitted", "besteffort-done"),
        "status-message-interval": O("int", None, positive=True),
        # simulated seconds per real second: past these the clock's sleeps and instants stop meaning anything
        "time-scale": O("float", 1.0, low=0.001, high=10000),
    },
    "accounting": {
        "datafile": O("str", None),
        "probes": O("str", ""),
        "attributes": O("str", ""),
        "schedule-file": O("str", None),
    },
    "deploy-imagetransfer": {
        "transfer-mechanism": O("choice", "unicast", "unicast", "multicast"),
        "avoid-redundant-transfers": O("bool", True),
        "force-imagetransfer-time": O("duration", None),
        "diskimage-reuse": O("choice", "none", "none", "image-caches"),
        "diskimage-cache-size": O("int", None, positive=True),
    },
    "tracefile": {
        "tracefile": O("str", REQUIRED),
        "format": O("choice", None, "lwf", "lwf-text", "swf"),
        "imagefile": O("str", None),
        "injectionfile": O("str", None),
        "runtime-slowdown-overhead": O("float", None),
        "add-overhead": O("choice", "none", "none", "all", "besteffort"),
        "bootshutdown-overhead": O("duration", None),
        "override-memory": O("int", -1),
        "swf-queues": O("intlist", None),
        "swf-processor-scale": O("int", 1, positive=True),
        "swf-memory": O("int", 1024, positive=True),
    },
    "daemon": {
        "listen": O("str", "127.0.0.1:42493"),
        "token": O("str", None),
        "pidfile": O("str", None),
    },
    "opennebula": {
        "host": O("str", "localhost"),
        "port": O("int", 2633, **PORT),
        "stop-when-no-more-leases": O("bool", False),
        "dry-run": O("bool", False),
    },
    # mode fast: the MQTT broker that carries FAST tasks to the hosts' agents, and how long to wait for them
    "mqtt": {
        "host": O("str", "127.0.0.1"),
        "port": O("int", 1883, **PORT),
        "username": O("str", None),
        "password": O("str", None),
        "tls-ca": O("str", None),
        # yes: run mode fast on a broker without credentials or TLS (anyone who reaches it can command the hosts)
        "insecure": O("bool", False),
        "keepalive": O("int", 30, low=1, high=65535),     # MQTT's own limit
        # seconds to wait for a task's result before a retry
        "task-timeout": O("float", 30.0, positive=True, high=3600),
        "task-retries": O("int", 2),
        # seconds without a message or an answer to a probe before a host is silent; 0: only a task or probe left
        # unanswered tells
        "host-timeout": O("float", 30.0, high=DAY),
        "hosts": O("str", None),    # mode fast: the agents' host names, in node order (node 1 is the first)
        # resources: from-agents: seconds the daemon waits at startup for every host's announcement
        "hosts-wait": O("float", 30.0, positive=True, high=3600),
    },
}
# Sections a configuration must have, as the manual says.
REQUIRED_SECTIONS = ("general", "scheduling", "accounting")


class Config:
    """A checked configuration: `cfg.get(section, option)` returns the typed value or the schema's default."""

    def __init__(self, values: dict[str, dict[str, Any]], path: str, base_dir: Path) -> None:
        self._values = values
        self.path = path
        self.base_dir = base_dir

    def get(self, section: str, option: str) -> Any:
        spec = SCHEMA[section][option]
        value = self._values.get(section, {}).get(option, spec.default)
        return None if value is REQUIRED else value

    def given(self, section: str, option: str) -> bool:
        return option in self._values.get(section, {})

    def resolve(self, relpath: str) -> Path:
        """A file named in the configuration, relative to the configuration file's folder."""
        p = Path(relpath).expanduser()
        return p if p.is_absolute() else self.base_dir / p


def parse_config(text: str, path: str = "<config>", base_dir: Path | None = None,
                 overrides: dict[str, dict[str, str]] | None = None) -> Config:
    parser = configparser.ConfigParser(interpolation=None, delimiters=(":", "="), strict=True,
                                       inline_comment_prefixes=None)
    parser.optionxform = str  # option names are case-sensitive, as in Haizea
    try:
        parser.read_string(text, source=path)
    except configparser.Error as exc:
        line = getattr(exc, "lineno", None)
        msg = exc.message.splitlines()[0] if hasattr(exc, "message") else str(exc).splitlines()[0]
        msg = re.sub(r"^While reading from .*?\[line\s+\d+\]: ", "", msg)
        raise InputError(f"malformed configuration: {msg}", f"{path}:{line}" if line else path) from None
    raw: dict[str, dict[str, str]] = {s: dict(parser.items(s)) for s in parser.sections()}
    for section, opts in (overrides or {}).items():
        raw.setdefault(section, {}).update(opts)
    values: dict[str, dict[str, Any]] = {}
    for section, opts in raw.items():
        if section not in SCHEMA:
            raise InputError(f"unknown section [{section}] (known sections: {', '.join(SCHEMA)})", path)
        values[section] = {}
        for option, rawval in opts.items():
            spec = SCHEMA[section].get(option)
            if spec is None and section == "scheduling" and option in REMOVED_OPTIONS:
                raise InputError(f"[scheduling] {option} was removed: {REMOVED_OPTIONS[option]}", path)
            if spec is None:
                raise InputError(f"[{section}] unknown option {option!r} "
                                 f"(options of [{section}]: {', '.join(SCHEMA[section])})", path)
            try:
                values[section][option] = spec.parse(rawval)
            except ValueError as exc:
                raise InputError(f"[{section}] {option}: {exc}", path) from None
    cfg = Config(values, path, base_dir or Path(path).resolve().parent)
    _check_required(cfg, values, path)
    _check_policies(values, path)
    return cfg


def _check_required(cfg: Config, values: dict[str, dict[str, Any]], path: str) -> None:
    def need(section: str, option: str, why: str = "") -> None:
        if option not in values.get(section, {}):
            raise InputError(f"[{section}] {option} is required{why}", path)

    for section in REQUIRED_SECTIONS:
        if section not in values:
            raise InputError(f"section [{section}] is required", path)
    for section, opts in SCHEMA.items():
        if section in values:
            for option, spec in opts.items():
                if spec.default is REQUIRED:
                    need(section, option)
    mode = cfg.get("general", "mode")
    if mode == "simulated" and "simulation" not in values:
        raise InputError("section [simulation] is required when [general] mode is simulated", path)
    if mode == "opennebula":
        raise InputError("[general] mode: opennebula is not supported by optlease; use simulated or fast", path)
    if cfg.get("simulation", "clock") == "simulated" and "simulation" in values:
        need("simulation", "starttime", " when [simulation] clock is simulated")
    if cfg.get("scheduling", "backfilling") == "intermediate":
        need("scheduling", "backfilling-reservations", " when [scheduling] backfilling is intermediate")
        if cfg.get("scheduling", "backfilling-reservations") <= 0:
            raise InputError("[scheduling] backfilling-reservations must be positive", path)
    from optlease.accounting.probes import BUILTIN

    for probe in cfg.get("accounting", "probes").split():
        if probe not in BUILTIN and "." not in probe:
            raise InputError(f"[accounting] probes: unknown probe {probe!r} "
                             f"(built in: {', '.join(BUILTIN)}; or a dotted path module.Class)", path)
    accounting_attributes(cfg)


def accounting_attributes(cfg: Config) -> dict[str, str]:
    """`[accounting] attributes`: `name=value` pairs separated by commas that label the run in its data file (a
    multi-configuration run's profile, trace and injection, as Haizea sets them)."""
    attrs: dict[str, str] = {}
    text = cfg.get("accounting", "attributes").strip()
    for pair in filter(None, (p.strip() for p in text.split(","))) if text else ():
        name, eq, value = pair.partition("=")
        if not eq or not name.strip() or not name.strip().replace("-", "_").isidentifier():
            raise InputError(f"[accounting] attributes: expected name=value pairs separated by commas, "
                             f"got {pair[:40]!r}", cfg.path)
        attrs[name.strip()] = value.strip()
    return attrs


def render_config(sections: Mapping[str, Mapping[str, Any]]) -> str:
    """The configuration text of `sections` (section -> option -> value), in their order: what parse_config reads."""
    lines: list[str] = []
    for section, options in sections.items():
        lines.append(f"[{section}]")
        lines.extend(f"{option}: {value}" for option, value in options.items())
    return "\n".join(lines) + "\n"


def load_config(path: str | Path, overrides: dict[str, dict[str, str]] | None = None) -> Config:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise InputError(exc.strerror or str(exc), str(path)) from None
    except UnicodeDecodeError:
        raise InputError("not a text file", str(path)) from None
    return parse_config(text, str(path), p.resolve().parent, overrides)


# What a policy class given by dotted path must have: the methods the scheduler calls (scheduling/policies.py).
POLICY_METHODS = {"policy-admission": ("accept",), "policy-preemption": ("score",),
                  "policy-host-selection": ("score",)}


def policy_loader(name: str, builtins: dict[str, Callable[..., Any]], what: str) -> Callable[..., Any]:
    """A policy factory by short name, or by dotted path `package.module.Class` (the manual's chapter 9): a class
    with the methods of its kind, so that a wrong path is refused when the configuration is read, not when the
    scheduler first calls it."""
    if name in builtins:
        return builtins[name]
    import importlib
    import inspect

    module_name, _, attr = name.rpartition(".")
    try:
        module = importlib.import_module(module_name)
        found = getattr(module, attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise InputError(f"[scheduling] {what}: cannot load policy {name!r} ({exc})") from None
    needs = POLICY_METHODS.get(what, ())
    if not inspect.isclass(found) or any(not callable(getattr(found, method, None)) for method in needs):
        raise InputError(f"[scheduling] {what}: {name!r} is not a policy class (a class with "
                         f"{' and '.join(m + '()' for m in needs)})")
    return found


def _check_policies(values: dict[str, dict[str, Any]], path: str) -> None:
    for option in POLICY_METHODS:
        name = values.get("scheduling", {}).get(option)
        if name is not None and "." in name:
            try:
                policy_loader(name, {}, option)
            except InputError as exc:
                raise exc.located(path) from None
