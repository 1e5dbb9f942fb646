"""Haizea's multi-configuration file (manual §5.5): reads `[multi]`, `[common:SECTION]` and `[PROFILE:SECTION]`, and
expands them into one configuration per profile x tracefile x injection, named as Haizea names them.

An unknown section or option, a section without a profile, a missing trace or injection file, or a profile whose
configuration does not check is an InputError naming the file, the section (or profile) and the option. The older
layout of Haizea's HPDC'08 files (`[profiles]`, `[traces]`, `[leaseinjections]`, `[run]`) is mapped by
optlease.formats.multiconfig_old into the same MultiConfig.
"""
from __future__ import annotations

import configparser
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from optlease.errors import InputError
from optlease.formats.config import SCHEMA, parse_config, render_config

MULTI = "multi"
COMMON = "common"
# [multi] options; `datadir` is what Haizea's code and sample file read, `basedatadir` what its manual writes
MULTI_OPTIONS = ("tracedir", "tracefiles", "injectiondir", "injectionfiles", "datadir", "basedatadir",
                 "skip-no-injection")
# the options each run's expansion sets: a multi-configuration lists them in [multi] instead
EXPANDED = {("tracefile", "tracefile"): "list the traces in [multi] tracefiles",
            ("tracefile", "injectionfile"): "list the injections in [multi] injectionfiles",
            ("accounting", "datafile"): "the data files go to [multi] basedatadir",
            ("accounting", "schedule-file"): "each run's schedule goes beside its data file"}
DATAFILE_SUFFIX = ".parquet"   # Haizea wrote `.dat` pickles; optlease's data file is Parquet (docs/datafile.md)
MAX_BYTES = 1 << 20            # a multi-configuration is a page of text, not a megabyte


@dataclass(frozen=True)
class Run:
    """One individual configuration of a sweep."""
    profile: str
    tracefile: Path
    injectionfile: Path | None
    name: str                                   # Haizea's name: PROFILE_TRACE+INJECTION
    sections: dict[str, dict[str, str]]

    @property
    def datafile(self) -> Path:
        return Path(self.sections["accounting"]["datafile"])

    @property
    def schedule_file(self) -> Path:
        return Path(self.sections["accounting"]["schedule-file"])

    def text(self) -> str:
        return render_config(self.sections)


@dataclass(frozen=True)
class MultiConfig:
    path: str
    profiles: tuple[str, ...]                   # in the order the file first names them
    tracefiles: tuple[Path, ...]
    injectionfiles: tuple[Path | None, ...]     # None: the trace alone (Haizea adds it unless skip-no-injection)
    datadir: Path
    common: dict[str, dict[str, str]]
    by_profile: dict[str, dict[str, dict[str, str]]]
    notes: tuple[str, ...] = field(default=())  # what a conversion from the older layout left out

    def runs(self) -> list[Run]:
        """Every individual configuration, checked: profile x tracefile x injection, in Haizea's order."""
        return [self._run(p, t, i) for p in self.profiles for t in self.tracefiles for i in self.injectionfiles]

    def _run(self, profile: str, tracefile: Path, injection: Path | None) -> Run:
        sections: dict[str, dict[str, str]] = {}
        for source in (self.common, self.by_profile.get(profile, {})):
            for section, options in source.items():
                sections.setdefault(section, {}).update(options)
        name = config_name(profile, tracefile, injection)
        trace = sections.setdefault("tracefile", {})
        trace["tracefile"] = str(tracefile)
        if injection is not None:
            trace["injectionfile"] = str(injection)
        accounting = sections.setdefault("accounting", {})
        accounting["datafile"] = str(self.datadir / (name + DATAFILE_SUFFIX))
        # beside it, as the report looks for it
        accounting["schedule-file"] = str(self.datadir / (name + ".schedule.json"))
        attrs = f"profile={profile},tracefile={tracefile},injectionfile={injection or ''}"
        accounting["attributes"] = ",".join(a for a in (attrs, accounting.get("attributes", "")) if a)
        # the generated file lives elsewhere: name every file it reads by its full path
        if "imagefile" in trace:
            trace["imagefile"] = str(_under(Path(self.path).resolve().parent, trace["imagefile"]))
        try:
            parse_config(render_config(sections), f"{self.path}, profile {profile}", Path(self.path).parent)
        except InputError as exc:
            raise InputError(exc.message, f"{self.path}, profile {profile}") from None
        return Run(profile, tracefile, injection, name, sections)


def config_name(profile: str, tracefile: Path, injection: Path | None) -> str:
    """Haizea's name of a run: `PROFILE_TRACE+INJECTION`, each file by its name up to the first dot."""
    name = tracefile.name.split(".")[0]
    if injection is not None:
        name += "+" + injection.name.split(".")[0]
    return f"{profile}_{name}"


def _under(base: Path, path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else (base / p).resolve()


def read_sections(text: str, path: str, strict: bool = True) -> dict[str, dict[str, str]]:
    """The raw sections of an INI text, in order; a malformed file is one line naming the line."""
    if len(text) > MAX_BYTES:
        raise InputError(f"a multi-configuration is at most {MAX_BYTES} bytes", path)
    parser = configparser.ConfigParser(interpolation=None, delimiters=(":", "="), strict=strict)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # names are case-sensitive, as in Haizea
    try:
        parser.read_string(text, source=path)
    except configparser.Error as exc:
        line = getattr(exc, "lineno", None)
        msg = re.sub(r"^While reading from .*?\[line\s+\d+\]: ", "", str(exc).splitlines()[0])
        raise InputError(f"malformed multi-configuration: {msg}", f"{path}:{line}" if line else path) from None
    return {s: dict(parser.items(s)) for s in parser.sections()}


def parse_multiconfig(text: str, path: str, dirs: dict[str, str] | None = None,
                      profiles: list[str] | None = None) -> MultiConfig:
    """A multi-configuration's text; `dirs` (tracedir, injectiondir, datadir) replaces the file's own folders and
    `profiles` picks some of its profiles.

    Relative folders are taken from the file's folder. The older HPDC'08 layout is recognised by its [run] section.
    """
    raw = read_sections(text, path, strict=False)
    if MULTI not in raw and "run" in raw:
        from optlease.formats.multiconfig_old import convert_old_layout

        return convert_old_layout(raw, path, dirs or {}, profiles)
    raw = read_sections(text, path)   # the current layout: a section twice is a mistake
    if MULTI not in raw:
        raise InputError("a multi-configuration needs a [multi] section (tracefiles, basedatadir, ...)", path)
    multi = raw[MULTI]
    for option in multi:
        if option in ("annotationdir", "annotationfiles"):
            raise InputError(f"[multi] {option}: lease annotation files are not supported by optlease", path)
        if option not in MULTI_OPTIONS:
            raise InputError(f"[multi] unknown option {option!r} (options of [multi]: {', '.join(MULTI_OPTIONS)})",
                             path)
    if "datadir" in multi and "basedatadir" in multi:
        raise InputError("[multi] give basedatadir or datadir, not both", path)
    common, by_profile, known = split_sections(raw, path)
    return build(path, pick(known, profiles, path), common, by_profile, multi, dirs or {})


def pick(known: list[str], wanted: list[str] | None, path: str) -> list[str]:
    """The profiles a user asked for (all when none), each one the file defines."""
    for name in wanted or ():
        if name not in known:
            raise InputError(f"no profile {name!r} (profiles: {', '.join(known)})", path)
    return list(dict.fromkeys(wanted)) if wanted else known


def split_sections(raw: dict[str, dict[str, str]], path: str
                   ) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, dict[str, str]]], list[str]]:
    """[common:S] and [PROFILE:S] sections, each S a configuration section and each option one it knows."""
    common: dict[str, dict[str, str]] = {}
    by_profile: dict[str, dict[str, dict[str, str]]] = {}
    profiles: list[str] = []
    for name, options in raw.items():
        if name == MULTI:
            continue
        profile, colon, section = name.partition(":")
        if not colon:
            raise InputError(f"section [{name}] has no profile: write [common:{name}] or [PROFILE:{name}]", path)
        if not profile.strip() or profile == MULTI or any(c in profile for c in "/\\ \t"):
            raise InputError(f"section [{name}]: {profile!r} is not a profile name (no spaces or slashes; "
                             f"not 'multi')", path)
        if section not in SCHEMA:
            raise InputError(f"section [{name}]: unknown section [{section}] (known: {', '.join(SCHEMA)})", path)
        for option in options:
            if option not in SCHEMA[section]:
                raise InputError(f"[{name}] unknown option {option!r} "
                                 f"(options of [{section}]: {', '.join(SCHEMA[section])})", path)
            if (section, option) in EXPANDED:
                raise InputError(f"[{name}] {option} is set for each run: {EXPANDED[section, option]}", path)
        if profile == COMMON:
            common[section] = options
        else:
            by_profile.setdefault(profile, {})[section] = options
            if profile not in profiles:
                profiles.append(profile)
    if not profiles:
        raise InputError("no profile: name at least one section [PROFILE:SECTION]", path)
    return common, by_profile, profiles


def build(path: str, profiles: list[str], common: dict[str, dict[str, str]],
          by_profile: dict[str, dict[str, dict[str, str]]], multi: dict[str, str], dirs: dict[str, str],
          notes: tuple[str, ...] = (), places: dict[str, str] | None = None) -> MultiConfig:
    """The MultiConfig of checked [multi]-like options: folders resolved and every listed file present.

    `places` names the section each option was read from when it was not [multi] (the older layout).
    """
    base = Path(path).resolve().parent

    def at(option: str) -> str:
        return f"[{(places or {}).get(option, MULTI)}] {option}"

    def folder(option: str, given: str | None) -> Path:
        where = dirs.get(option) or given
        return _under(Path.cwd() if dirs.get(option) else base, where) if where else base

    def files(option: str, folder_option: str) -> list[Path]:
        names = multi.get(option, "").replace(",", " ").split()
        found = []
        for name in names:
            file = folder(folder_option, multi.get(folder_option)) / name
            if not file.is_file():
                raise InputError(f"{at(option)}: no such file {file}", path)
            found.append(file)
        return found

    traces = files("tracefiles", "tracedir")
    if not traces:
        raise InputError(f"{at('tracefiles')}: name at least one trace", path)
    if multi.get("injectiondir") and not multi.get("injectionfiles", "").strip():
        raise InputError(f"{at('injectiondir')} is given but injectionfiles is empty", path)
    skip = multi.get("skip-no-injection", "false").strip().lower()
    if skip not in ("true", "false", "yes", "no"):
        raise InputError(f"{at('skip-no-injection')}: {skip!r} is not True or False", path)
    injections: list[Path | None] = list(files("injectionfiles", "injectiondir"))
    if skip in ("false", "no") or not injections:
        injections.append(None)
    datadir = dirs.get("datadir") or multi.get("basedatadir") or multi.get("datadir")
    if not datadir:
        raise InputError(f"{at('basedatadir')}: say where the runs' data files go", path)
    data = _under(Path.cwd() if dirs.get("datadir") else base, datadir)
    counts = Counter(config_name(p, t, i) for p in profiles for t in traces for i in injections)
    twice = sorted(n for n, count in counts.items() if count > 1)
    if twice:
        raise InputError(f"two runs would share the name {twice[0]!r} and its data file (files with the same "
                         f"name up to the first dot, or profile and trace names that join the same)", path)
    return MultiConfig(path, tuple(profiles), tuple(traces), tuple(injections), data, common, by_profile, notes)


def load_multiconfig(path: str | Path, dirs: dict[str, str] | None = None,
                     profiles: list[str] | None = None) -> MultiConfig:
    p = Path(path)
    try:
        if p.stat().st_size > MAX_BYTES:
            raise InputError(f"a multi-configuration is at most {MAX_BYTES} bytes", str(path))
        text = p.read_text()
    except OSError as exc:
        raise InputError(exc.strerror or str(exc), str(path)) from None
    except UnicodeDecodeError:
        raise InputError("not a text file", str(path)) from None
    return parse_multiconfig(text, str(path), dirs, profiles)
