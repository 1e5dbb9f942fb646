"""Multi-configuration files: the manual's example expands into exactly Haizea's configurations, the HPDC'08 layout
maps (or says in one line what cannot), and hostile files are one error line naming the file, section and option."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optlease.cli.main import main
from optlease.errors import InputError
from optlease.formats.config import parse_config
from optlease.formats.multiconfig import load_multiconfig, parse_multiconfig

REPO = Path(__file__).resolve().parents[1]
GRID = REPO / "instances" / "experiments"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "instances" / "haizea"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="the shared Haizea instances are not checked out "
                                                              "next to the repository")
PROFILES = ["nobackfilling", "backfilling", "backfilling+SR", "backfilling+SR+M"]
TRACES = ["withprematureend", "withoutprematureend"]
INJECTIONS = ["+inj1", "+inj2", ""]   # Haizea runs each trace with each injection and alone


def expected_names() -> list[str]:
    """Haizea's names, in its order: profile, then trace, then injection (the trace alone last)."""
    return [f"{p}_{t}{i}" for p in PROFILES for t in TRACES for i in INJECTIONS]


def test_the_manuals_example_expands_into_haizeas_24_configurations(tmp_path):
    multi = load_multiconfig(GRID / "multi.conf", {"datadir": str(tmp_path)})
    runs = multi.runs()
    assert [r.name for r in runs] == expected_names()
    first = runs[0]
    traces = GRID / "traces"
    assert first.sections == {
        "general": {"loglevel": "STATUS", "mode": "simulated"},
        "accounting": {"probes": "ar best-effort cpu-utilization",
                       "datafile": str(tmp_path / "nobackfilling_withprematureend+inj1.parquet"),
                       "schedule-file": str(tmp_path / "nobackfilling_withprematureend+inj1.schedule.json"),
                       "attributes": f"profile=nobackfilling,tracefile={traces / 'withprematureend.lwf'},"
                                     f"injectionfile={traces / 'inj1.lwf'}"},
        "simulation": {"clock": "simulated", "starttime": "2006-11-25 13:00:00", "resources": "4 CPU:100 Memory:1024",
                       "imagetransfer-bandwidth": "100"},
        "scheduling": {"policy-preemption": "ar-preempts-everything", "suspend-rate": "50", "resume-rate": "50",
                       "backfilling": "off", "suspension": "none"},
        "tracefile": {"tracefile": str(traces / "withprematureend.lwf"), "injectionfile": str(traces / "inj1.lwf")},
    }
    alone = runs[2]
    assert "injectionfile" not in alone.sections["tracefile"] and alone.datafile.name == \
        "nobackfilling_withprematureend.parquet"
    last = runs[-1]   # a profile's options override the common ones, section by section
    cfg = parse_config(last.text(), "generated.conf")
    assert (cfg.get("scheduling", "migration"), cfg.get("scheduling", "suspension"),
            cfg.get("scheduling", "suspend-rate")) == ("yes", "all", 50.0)


@needs_shared
def test_haizeas_own_sample_file_expands_the_same_with_its_folders_moved(tmp_path):
    dirs = {"tracedir": str(SHARED / "multi"), "injectiondir": str(SHARED / "multi"), "datadir": str(tmp_path)}
    runs = load_multiconfig(SHARED / "etc" / "sample_multi.conf", dirs).runs()
    assert [r.name for r in runs] == expected_names()
    assert runs[4].sections["scheduling"] == {"suspend-rate": "50", "resume-rate": "50", "backfilling": "off",
                                              "suspension": "none", "migration": "no"}


def test_generate_configs_writes_one_file_per_run_named_as_haizea_does(tmp_path, capsys):
    assert main(["generate-configs", "-c", str(GRID / "multi.conf"), "-d", str(tmp_path / "confs"),
                 "--datadir", str(tmp_path / "data"), "--profiles", "backfilling+SR"]) == 0
    written = sorted(p.name for p in (tmp_path / "confs").iterdir())
    assert written == sorted(f"backfilling+SR_{t}{i}.conf" for t in TRACES for i in INJECTIONS)
    cfg = parse_config((tmp_path / "confs" / "backfilling+SR_withoutprematureend+inj2.conf").read_text(), "x")
    assert cfg.get("accounting", "datafile") == str(tmp_path / "data" /
                                                    "backfilling+SR_withoutprematureend+inj2.parquet")
    assert cfg.get("tracefile", "injectionfile") == str(GRID / "traces" / "inj2.lwf")
    assert "6 configurations written" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------- the HPDC'08 layout

OLD = """[profiles]
names: plain, overhead, cached

[traces]
tracedir: {dir}
tracefiles: withprematureend.lwf

[leaseinjections]
injectiondir: {dir}
injectionfiles: inj1.lwf inj2.lwf

[run]
profiles: plain overhead
traces: ALL
injections: inj2.lwf

[reporting]
reportdir: /nowhere

[common:simulation]
starttime: 2006-11-25 13:00:00
nodes: 4
resources: CPU,1;Mem,1024;Disk,20000
bandwidth: 100
stop-when: best-effort-done
suspendresume-rate: 50

[plain:general]
backfilling: intermediate
backfilling-reservations: 4
suspension: none
migration: False
transfer: none
imagefile: /nowhere/37_uniform.images

[overhead:general]
backfilling: aggressive
suspension: all
migration: True
migrate: mem
transfer: none

[overhead:simulation]
runtime-overhead: 5
bootshutdown-overhead: 20

[cached:general]
transfer: multicast
reuse: cowpool
"""


def test_the_older_layout_maps_onto_the_current_options(tmp_path):
    text = OLD.format(dir=GRID / "traces")
    multi = parse_multiconfig(text, str(tmp_path / "old.conf"), {"datadir": str(tmp_path)})
    runs = multi.runs()
    assert [r.name for r in runs] == ["plain_withprematureend+inj2", "overhead_withprematureend+inj2"]
    plain = parse_config(runs[0].text(), "plain.conf")
    assert (plain.get("simulation", "resources"), plain.get("simulation", "stop-when"),
            plain.get("scheduling", "backfilling"), plain.get("scheduling", "backfilling-reservations"),
            plain.get("scheduling", "suspension"), plain.get("scheduling", "migration"),
            plain.get("scheduling", "suspend-rate"), plain.get("scheduling", "policy-preemption"),
            plain.get("tracefile", "imagefile")) == \
        ("4 CPU:100 Memory:1024", "besteffort-done", "intermediate", 4, "none", "no", 50.0,
         "ar-preempts-everything", None)
    overhead = parse_config(runs[1].text(), "overhead.conf")
    assert (overhead.get("scheduling", "migration"), overhead.get("tracefile", "runtime-slowdown-overhead"),
            overhead.get("tracefile", "add-overhead"), overhead.get("tracefile", "bootshutdown-overhead")) == \
        ("yes", 5.0, "all", 20)
    assert any("imagefile left out" in n for n in multi.notes)
    assert any("Disk" in n or "disk" in n for n in multi.notes)


def test_the_older_layouts_image_transfers_and_caches_map_onto_deploy_imagetransfer(tmp_path):
    text = OLD.format(dir=GRID / "traces").replace("[cached:general]\ntransfer: multicast\nreuse: cowpool\n",
                                                   "[cached:general]\ntransfer: multicast\nreuse: cowpool\n"
                                                   "suspension: all\nmaxpool: 20480\n"
                                                   "avoid-redundant-transfers: True\n"
                                                   "imagefile: /nowhere/37_uniform.images\n")
    multi = parse_multiconfig(text, str(tmp_path / "old.conf"), {"datadir": str(tmp_path)}, ["cached"])
    cached = parse_config(multi.runs()[0].text(), "cached.conf")
    assert (cached.get("general", "lease-preparation"), cached.get("deploy-imagetransfer", "transfer-mechanism"),
            cached.get("deploy-imagetransfer", "diskimage-reuse"),
            cached.get("deploy-imagetransfer", "diskimage-cache-size"),
            cached.get("deploy-imagetransfer", "avoid-redundant-transfers"),
            cached.get("tracefile", "imagefile")) == \
        ("imagetransfer", "multicast", "image-caches", 20480, True, "/nowhere/37_uniform.images")


OLD_FAULTS = {
    "unknown-transfer": ({"profiles": ["cached"]}, OLD.replace("transfer: multicast", "transfer: carrier-pigeon"),
                         "[cached:general] transfer: carrier-pigeon"),
    "reuse-without-transfers": ({"profiles": ["plain"]}, OLD.replace("transfer: none\nimagefile",
                                                                     "transfer: none\nreuse: cowpool\nimagefile"),
                                "[plain:general] reuse: cowpool: image caches need image transfers"),
    "unknown-old-option": ({}, OLD.replace("suspendresume-rate: 50", "suspendresume-rate: 50\nwarp: 9"),
                           "[common:simulation] warp: no counterpart in optlease"),
    "run-names-an-undefined-profile": ({}, OLD.replace("profiles: plain overhead", "profiles: plain ghost"),
                                       "[run] profiles: 'ghost' is not in [profiles] names"),
    "injection-not-listed": ({}, OLD.replace("injections: inj2.lwf", "injections: inj9.lwf"),
                             "[run] injections: 'inj9.lwf' is not in [leaseinjections] injectionfiles"),
    "no-datadir": ({"dirs": {}}, OLD, "names no folder for data files: give one (--datadir)"),
    "bad-resources": ({}, OLD.replace("CPU,1;", "CPU,one;"), "[common:simulation] resources: 'CPU,one'"),
    "negative-maxpool": ({"profiles": ["cached"]},
                         OLD.replace("reuse: cowpool\n", "reuse: cowpool\nmaxpool: -20\n"),
                         "[deploy-imagetransfer] diskimage-cache-size: '-20' must be positive"),
}


@pytest.mark.parametrize(("how", "text", "message"), OLD_FAULTS.values(), ids=OLD_FAULTS.keys())
def test_what_the_older_layout_cannot_map_is_one_line_naming_it(tmp_path, how, text, message):
    dirs = how.get("dirs", {"datadir": str(tmp_path)})
    with pytest.raises(InputError) as err:
        parse_multiconfig(text.format(dir=GRID / "traces"), "old.conf", dirs, how.get("profiles")).runs()
    assert message in str(err.value) and str(err.value).startswith("old.conf")
    assert "\n" not in str(err.value)


@needs_shared
def test_haizeas_hpdc08_file_reads_with_the_profiles_optlease_can_run(tmp_path, capsys):
    conf = SHARED / "etc" / "blue-30days-24h.conf"
    dirs = ["--tracedir", str(SHARED / "blue"), "--injectiondir", str(SHARED / "blue" / "injected_leases" / "30days"),
            "--datadir", str(tmp_path / "data")]
    # every profile maps, the HPDC'08 image-transfer profiles (vm+noreuseopt, vm+reuse1, vm+reuse2) too
    assert main(["generate-configs", "-c", str(conf), "-d", str(tmp_path / "all"), *dirs]) == 0
    reuse = parse_config((tmp_path / "all" / "vm+reuse1_30days+work_10-dur_2h-size_1small.conf").read_text(), "x")
    assert (reuse.get("general", "lease-preparation"), reuse.get("deploy-imagetransfer", "diskimage-cache-size"),
            reuse.get("deploy-imagetransfer", "transfer-mechanism")) == ("imagetransfer", 20480, "multicast")
    capsys.readouterr()
    assert main(["generate-configs", "-c", str(conf), "-d", str(tmp_path / "three"), *dirs,
                 "--profiles", "novm,novm+preempting,novmC"]) == 0
    written = sorted(p.name for p in (tmp_path / "three").iterdir())
    assert len(written) == 3 * 36 and "novmC_30days+work_05-dur_2h-size_1small.conf" in written
    cfg = parse_config((tmp_path / "three" / "novm+preempting_30days+work_30-dur_3h-size_3large.conf").read_text(),
                       "x")
    assert (cfg.get("scheduling", "suspension"), cfg.get("scheduling", "migration"),
            cfg.get("simulation", "resources")) == ("all", "yes", "144 CPU:100 Memory:1024")
    assert "note:" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------- hostile files

GOOD = """[multi]
tracedir: {dir}
tracefiles: withprematureend.lwf
basedatadir: data

[common:general]
mode: simulated

[common:simulation]
clock: simulated
starttime: 2006-11-25 13:00:00
resources: 4 CPU:100 Memory:1024
imagetransfer-bandwidth: 100

[p:scheduling]
suspension: none
suspend-rate: 50
resume-rate: 50

[p:accounting]
"""
HOSTILE = {
    "section-without-profile": (GOOD + "[general]\nloglevel: INFO\n", "section [general] has no profile"),
    "empty-profile": (GOOD + "[:general]\nloglevel: INFO\n", "is not a profile name"),
    "profile-with-a-slash": (GOOD + "[../../x:general]\nloglevel: INFO\n", "is not a profile name"),
    "unknown-section": (GOOD + "[p:nonsense]\na: 1\n", "section [p:nonsense]: unknown section [nonsense]"),
    "unknown-option": (GOOD + "[p:general]\nfrobnicate: 1\n", "[p:general] unknown option 'frobnicate'"),
    "unknown-multi-option": (GOOD.replace("basedatadir: data", "basedatadir: data\ndatdir: x"),
                             "[multi] unknown option 'datdir'"),
    "annotations": (GOOD.replace("basedatadir: data", "basedatadir: data\nannotationfiles: a.lwf"),
                    "[multi] annotationfiles: lease annotation files are not supported"),
    "missing-trace": (GOOD.replace("withprematureend.lwf", "nosuch.lwf"), "[multi] tracefiles: no such file"),
    "missing-injection": (GOOD.replace("basedatadir", "injectionfiles: gone.lwf\nbasedatadir"),
                          "[multi] injectionfiles: no such file"),
    "one-run-twice": (GOOD.replace("basedatadir", "injectiondir: {dir}\ninjectionfiles: inj1.lwf inj1.lwf\nbasedatadir"),
                      "two runs would share the name 'p_withprematureend+inj1'"),
    "no-multi": (GOOD.replace("[multi]", "[common:tracefile]"), "needs a [multi] section"),
    "no-datadir": (GOOD.replace("basedatadir: data", ""), "[multi] basedatadir: say where"),
    "both-datadirs": (GOOD.replace("basedatadir: data", "basedatadir: a\ndatadir: b"), "not both"),
    "tracefile-in-a-profile": (GOOD + "[p:tracefile]\ntracefile: x.lwf\n", "[p:tracefile] tracefile is set for "
                                                                          "each run"),
    "bad-value": (GOOD.replace("suspension: none", "suspension: sometimes"),
                  "profile p: [scheduling] suspension: 'sometimes' is not one of"),
    "missing-required": (GOOD.replace("suspend-rate: 50\n", ""),
                         "profile p: [scheduling] suspend-rate is required"),
    "no-profile": (GOOD.split("[p:scheduling]")[0], "no profile"),
    "section-twice": (GOOD + "[p:scheduling]\nbackfilling: off\n", "malformed multi-configuration"),
    "yaml-not-ini": ("multi: &a [tracefiles, *a]\n", "malformed multi-configuration"),
    "unknown-profile-asked": (GOOD, "no profile 'q' (profiles: p)"),
}


@pytest.mark.parametrize(("text", "message"), HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_multiconfiguration_is_one_line_naming_where(tmp_path, capsys, text, message):
    conf = tmp_path / "multi.conf"
    conf.write_text(text.format(dir=GRID / "traces"))
    profiles = ["--profiles", "q"] if "unknown-profile" in message or "'q'" in message else []
    code = main(["generate-configs", "-c", str(conf), "-d", str(tmp_path / "out"), *profiles])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"optlease: error: {conf}") and message in err
    assert not (tmp_path / "out").exists()   # nothing written when any configuration is wrong


@pytest.mark.parametrize("content", [b"\xff\xfe\x00binary", b"[multi]\n" + b"x" * (1 << 20) + b": 1\n"],
                         ids=["binary", "over-a-megabyte"])
def test_a_file_that_is_no_multiconfiguration_is_one_line(tmp_path, capsys, content):
    conf = tmp_path / "multi.conf"
    conf.write_bytes(content)
    assert main(["generate-configs", "-c", str(conf), "-d", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(conf) in err


# ------------------------------------------------------------------------------------------------ the expansion

NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789+-_", min_size=1, max_size=8)


@settings(max_examples=40, deadline=None)
@given(profiles=st.lists(NAME.filter(lambda n: n not in ("common", "multi")), min_size=1, max_size=3, unique=True),
       traces=st.lists(NAME, min_size=1, max_size=3, unique=True),
       injections=st.lists(NAME, max_size=3, unique=True), skip=st.booleans())
def test_every_combination_runs_once_and_writes_inside_the_data_folder(profiles, traces, injections, skip):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in traces:
            (folder / f"{name}.lwf").write_text("")
        (folder / "inj").mkdir()
        for name in injections:
            (folder / "inj" / f"{name}.lwf").write_text("")
        text = GOOD.replace("tracefiles: withprematureend.lwf",
                            "tracefiles: " + " ".join(f"{t}.lwf" for t in traces)).replace("{dir}", tmp)
        if injections:
            text = text.replace("basedatadir: data", "injectiondir: inj\ninjectionfiles: " +
                                " ".join(f"{i}.lwf" for i in injections) + f"\nskip-no-injection: {skip}\n"
                                "basedatadir: data")
        text = text.replace("[p:", "[common:") + "".join(f"[{p}:general]\nloglevel: INFO\n" for p in profiles)
        alone = [None] if not injections or not skip else []
        expected = [(p, t, i) for p in profiles for t in traces for i in [*injections, *alone]]
        names = [f"{p}_{t}{'+' + i if i else ''}" for p, t, i in expected]
        if len(set(names)) < len(names):   # `a_b` x `c` and `a` x `b_c`: refused, never one file for two runs
            with pytest.raises(InputError, match="two runs would share the name"):
                parse_multiconfig(text, str(folder / "multi.conf"))
            return
        runs = parse_multiconfig(text, str(folder / "multi.conf")).runs()
        assert [(r.profile, r.tracefile.stem, r.injectionfile and r.injectionfile.stem) for r in runs] == expected
        files = [r.datafile for r in runs] + [r.schedule_file for r in runs]
        assert len(set(files)) == len(files)          # no two runs write the same file
        assert all(f.parent == folder / "data" for f in files)


@needs_shared
def test_the_hpdc08_grid_expands_into_216_month_long_runs(tmp_path, capsys):
    injections = SHARED / "blue" / "injected_leases" / "30days"
    assert main(["generate-configs", "-c", str(GRID / "hpdc08.conf"), "-d", str(tmp_path / "confs"),
                 "--injectiondir", str(injections), "--datadir", str(tmp_path / "data")]) == 0
    written = sorted(p.stem for p in (tmp_path / "confs").iterdir())
    assert written == sorted(f"{profile}_30days+{inj.stem}" for profile in ("no-suspension", "aggressive+SR",
                                                                           "intermediate-4")
                             for inj in injections.glob("*.lwf"))
    assert len(written) == 216
    cfg = parse_config((tmp_path / "confs" / "aggressive+SR_30days+work_20-dur_4h-size_3large.conf").read_text(),
                       "x")
    assert (cfg.get("tracefile", "tracefile"), cfg.get("scheduling", "suspension"),
            cfg.get("simulation", "stop-when")) == (str(REPO / "instances" / "blue" / "30days.swf"), "all",
                                                    "besteffort-done")
    # without the folder of the injections, which Haizea ships: one line saying which file is missing
    assert main(["generate-configs", "-c", str(GRID / "hpdc08.conf"), "-d", str(tmp_path / "none")]) == 2
    assert "[multi] injectionfiles: no such file" in capsys.readouterr().err
