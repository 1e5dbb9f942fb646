"""Maps the older multi-configuration layout of Haizea's HPDC'08 experiments (`[profiles]`, `[traces]`,
`[leaseinjections]`, `[run]`, options of Haizea's early releases) onto a MultiConfig.

What has a counterpart in optlease is renamed (image transfers and caches too: `transfer`, `reuse: cowpool`,
`maxpool`, `avoid-redundant-transfers`, `imagefile`); what only served image transfers is left out with a note in
the profiles that run without them; what would change a run and has no counterpart is an InputError naming the
file, the section and the option.
"""
from __future__ import annotations

from typing import Callable

from optlease.errors import InputError
from optlease.formats.multiconfig import COMMON, MultiConfig, build, pick

Setting = list[tuple[str, str, str]]          # (section, option, value) of the current layout
# the early releases let an AR preempt any best-effort lease and ran no-VM-overhead traces simulated
DEFAULTS = {"general": {"mode": "simulated"},
            "simulation": {"clock": "simulated"},
            "scheduling": {"policy-preemption": "ar-preempts-everything"},
            "accounting": {"probes": "ar best-effort immediate cpu-utilization"}}
REPORTING = ("reporting", "graph-")            # the old report generator's sections: optlease report replaces them
TRANSFERS_ONLY = ("imagefile", "avoid-redundant-transfers")


def _bool(value: str) -> bool:
    return value.strip().lower() in ("true", "yes", "1", "on")


def _resources(nodes: str, resources: str) -> str:
    """`CPU,1;Mem,1024;Disk,20000` on `144` nodes -> `144 CPU:100 Memory:1024` (CPU counted in percent)."""
    parts = []
    for item in resources.split(";"):
        kind, _, amount = item.partition(",")
        kind, amount = kind.strip(), amount.strip()
        if not amount.isdigit():
            raise ValueError(f"{item!r} is not `TYPE,AMOUNT`")
        if kind == "CPU":
            parts.append(f"CPU:{int(amount) * 100}")
        elif kind == "Mem":
            parts.append(f"Memory:{amount}")
    if not nodes.strip().isdigit():
        raise ValueError(f"nodes: {nodes!r} is not a whole number")
    return f"{nodes.strip()} {' '.join(parts)}"


STOP_WHEN = {"best-effort-done": "besteffort-done", "all-leases-done": "all-leases-done",
             "besteffort-submitted": "besteffort-submitted"}
RENAMED: dict[tuple[str, str], Callable[[str], Setting]] = {
    ("general", "loglevel"): lambda v: [("general", "loglevel", v)],
    ("general", "backfilling"): lambda v: [("scheduling", "backfilling", v)],
    ("general", "backfilling-reservations"): lambda v: [("scheduling", "backfilling-reservations", v)],
    ("general", "suspension"): lambda v: [("scheduling", "suspension", v)],
    ("simulation", "starttime"): lambda v: [("simulation", "starttime", v)],
    ("simulation", "bandwidth"): lambda v: [("simulation", "imagetransfer-bandwidth", v)],
    ("simulation", "stop-when"): lambda v: [("simulation", "stop-when", STOP_WHEN.get(v.strip(), v))],
    ("simulation", "suspendresume-rate"): lambda v: [("scheduling", "suspend-rate", v),
                                                     ("scheduling", "resume-rate", v)],
    ("simulation", "suspend-threshold-factor"): lambda v: [("scheduling", "scheduling-threshold-factor", v)],
    # the early releases slowed every lease down by this percentage (unless told: best-effort only)
    ("simulation", "runtime-overhead"): lambda v: [("tracefile", "runtime-slowdown-overhead", v),
                                                   ("tracefile", "add-overhead", "all")],
    ("simulation", "bootshutdown-overhead"): lambda v: [("tracefile", "bootshutdown-overhead", v)],
}


def _profile(options_by_section: dict[str, dict[str, str]], where: Callable[[str], str]
             ) -> tuple[dict[str, dict[str, str]], list[str]]:
    """One profile's (or the common) old sections in the current layout, and notes on what was left out."""
    out: dict[str, dict[str, str]] = {}
    notes: list[str] = []

    def put(setting: Setting) -> None:
        for section, option, value in setting:
            out.setdefault(section, {})[option] = value

    general = options_by_section.get("general", {})
    transfer = general.get("transfer", "none").strip()
    reuse = general.get("reuse", "none").strip()
    if transfer in ("unicast", "multicast"):
        # the early releases' image transfers: the current [deploy-imagetransfer] options, the image file kept
        put([("general", "lease-preparation", "imagetransfer"),
             ("deploy-imagetransfer", "transfer-mechanism", transfer)])
        if "avoid-redundant-transfers" in general:
            put([("deploy-imagetransfer", "avoid-redundant-transfers",
                  "True" if _bool(general["avoid-redundant-transfers"]) else "False")])
        if "imagefile" in general:
            put([("tracefile", "imagefile", general["imagefile"].strip())])
        if reuse == "cowpool":
            put([("deploy-imagetransfer", "diskimage-reuse", "image-caches")])
            if "maxpool" in general:
                put([("deploy-imagetransfer", "diskimage-cache-size", general["maxpool"].strip())])
        elif reuse != "none" or "maxpool" in general:
            raise InputError(f"[{where('general')}] reuse: {reuse}: no counterpart in optlease (known: none, "
                             f"cowpool)")
    elif transfer != "none":
        raise InputError(f"[{where('general')}] transfer: {transfer}: expected none, unicast or multicast")
    elif reuse != "none" or "maxpool" in general:
        raise InputError(f"[{where('general')}] reuse: {reuse}: image caches need image transfers "
                         f"(transfer: unicast or multicast)")
    if "migration" in general:
        what = general.get("migrate", "mem").strip()
        put([("scheduling", "migration",
              "no" if not _bool(general["migration"]) else "yes-notransfer" if what == "nothing" else "yes")])
    simulation = options_by_section.get("simulation", {})
    if "nodes" in simulation or "resources" in simulation:
        try:
            put([("simulation", "resources",
                  _resources(simulation.get("nodes", ""), simulation.get("resources", "")))])
        except ValueError as exc:
            raise InputError(f"[{where('simulation')}] resources: {exc}") from None
        if any(k not in ("CPU", "Mem") for k in (i.partition(",")[0].strip()
                                                 for i in simulation.get("resources", "").split(";"))):
            notes.append(f"[{where('simulation')}] resources: only CPU and Mem kept (disk and network "
                         f"capacities served image transfers)")
    for section, options in options_by_section.items():
        if section not in ("general", "simulation"):
            raise InputError(f"section [{where(section)}]: the older layout has no section [{section}] "
                             f"(its options are in [general] and [simulation])")
        for option, value in options.items():
            if option in ("transfer", "reuse", "maxpool", "migration", "migrate", "nodes", "resources"):
                continue
            if option in TRANSFERS_ONLY and transfer in ("unicast", "multicast"):
                continue   # mapped above
            if option in TRANSFERS_ONLY:
                notes.append(f"[{where(section)}] {option} left out: only image transfers used it")
                continue
            rename = RENAMED.get((section, option))
            if rename is None:
                raise InputError(f"[{where(section)}] {option}: no counterpart in optlease")
            put(rename(value))
    return out, notes


def _listed(raw: dict[str, dict[str, str]], section: str, option: str) -> list[str]:
    return raw.get(section, {}).get(option, "").replace(",", " ").split()


def _chosen(raw: dict[str, dict[str, str]], option: str, available: list[str], where: str, path: str) -> list[str]:
    """[run] traces / injections: ALL or some of those listed in their own section."""
    wanted = _listed(raw, "run", option)
    if not wanted or wanted == ["ALL"]:
        return available
    for name in wanted:
        if name not in available:
            raise InputError(f"[run] {option}: {name!r} is not in {where}", path)
    return wanted


def convert_old_layout(raw: dict[str, dict[str, str]], path: str, dirs: dict[str, str],
                       wanted: list[str] | None) -> MultiConfig:
    notes: list[str] = []
    by_name: dict[str, dict[str, dict[str, str]]] = {}
    for name, options in raw.items():
        if name in ("profiles", "traces", "leaseinjections", "run") or name.startswith(REPORTING):
            continue
        profile, colon, section = name.partition(":")
        if not colon:
            raise InputError(f"section [{name}]: the older layout has no such section (known: [profiles], "
                             f"[traces], [leaseinjections], [run], [PROFILE:general], [PROFILE:simulation])", path)
        by_name.setdefault(profile, {})[section] = options
    if any(name.startswith(REPORTING) for name in raw):
        notes.append("[reporting] and [graph-*] left out: optlease report makes the report")
    defined = _listed(raw, "profiles", "names")
    for profile in by_name:
        if profile != COMMON and profile not in defined:
            raise InputError(f"sections [{profile}:...]: {profile!r} is not in [profiles] names", path)
    ran = _listed(raw, "run", "profiles")
    for profile in ran:
        if profile not in defined:
            raise InputError(f"[run] profiles: {profile!r} is not in [profiles] names", path)
    profiles = pick(defined, wanted or ran or defined, path)

    def placed(profile: str) -> Callable[[str], str]:
        def where(section: str) -> str:
            return f"{profile}:{section}"
        return where

    try:
        common, common_notes = _profile(by_name.get(COMMON, {}), placed(COMMON))
        converted = {p: _profile(by_name.get(p, {}), placed(p)) for p in profiles}
    except InputError as exc:
        raise exc.located(path) from None
    notes += common_notes + [n for _, ns in converted.values() for n in ns]
    for section, options in DEFAULTS.items():
        common[section] = {**options, **common.get(section, {})}
    traces = _chosen(raw, "traces", _listed(raw, "traces", "tracefiles"), "[traces] tracefiles", path)
    injections = _chosen(raw, "injections", _listed(raw, "leaseinjections", "injectionfiles"),
                         "[leaseinjections] injectionfiles", path)
    multi = {"tracedir": raw.get("traces", {}).get("tracedir", ""), "tracefiles": " ".join(traces),
             "injectiondir": raw.get("leaseinjections", {}).get("injectiondir", ""),
             "injectionfiles": " ".join(injections),
             # the HPDC'08 runs always had an injection
             "skip-no-injection": "true" if injections else "false"}
    if not dirs.get("datadir"):
        raise InputError("the older layout names no folder for data files: give one (--datadir)", path)
    return build(path, profiles, common, {p: c for p, (c, _) in converted.items()}, multi, dirs,
                 tuple(dict.fromkeys(notes)),
                 places={"tracedir": "traces", "tracefiles": "traces", "injectiondir": "leaseinjections",
                         "injectionfiles": "leaseinjections"})
