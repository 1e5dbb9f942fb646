"""The Haizea configuration file: defaults as the manual gives them, and every bad input named precisely."""
from __future__ import annotations

import pytest

from optlease.errors import InputError
from optlease.formats.config import parse_config

from conftest import INSTANCES, simulated_config

BASE = simulated_config("4 CPU:100 Memory:1024", clock="simulated", starttime="2006-11-25 13:00:00",
                        tracefile="trace.lwf")


def conf(extra: str = "", drop: str | None = None) -> str:
    text = BASE if drop is None else "\n".join(line for line in BASE.splitlines() if not line.startswith(drop))
    for line in extra.strip().splitlines():
        section, _, option = line.partition(" ")
        text = text.replace(f"[{section}]\n", f"[{section}]\n{option}\n", 1)
    return text


def test_image_transfer_options_are_read():
    from optlease.scheduling.options import SchedulingOptions

    text = conf("general lease-preparation: imagetransfer") + ("[deploy-imagetransfer]\ntransfer-mechanism: multicast\n"
                                                               "diskimage-reuse: image-caches\n"
                                                               "diskimage-cache-size: 20480\n"
                                                               "force-imagetransfer-time: 00:02:00\n")
    prep = SchedulingOptions.from_config(parse_config(text, "site.conf")).preparation
    assert (prep.managed, prep.mechanism, prep.reuse, prep.cache_size, prep.force_time, prep.avoid_redundant,
            prep.bandwidth) == (True, "multicast", "image-caches", 20480, 120, True, 100)
    assert not SchedulingOptions.from_config(parse_config(conf(), "site.conf")).preparation.managed


def test_defaults_are_the_manuals():
    cfg = parse_config(conf(), "site.conf")
    assert cfg.get("general", "loglevel") == "INFO"
    assert cfg.get("general", "lease-failure-handling") == "cancel"
    assert cfg.get("scheduling", "policy-preemption") == "no-preemption"
    assert cfg.get("scheduling", "policy-host-selection") == "greedy"
    assert cfg.get("scheduling", "wakeup-interval") == 60
    assert cfg.get("scheduling", "non-schedulable-interval") == 10
    assert cfg.get("scheduling", "suspendresume-exclusion") == "local"
    assert cfg.get("scheduling", "scheduling-threshold-factor") == 1
    assert cfg.get("scheduling", "migration") == "no"
    assert cfg.get("simulation", "stop-when") == "all-leases-done"
    assert cfg.get("tracefile", "add-overhead") == "none"
    assert cfg.get("tracefile", "override-memory") == -1


@pytest.mark.parametrize("text, fragments", [
    pytest.param(conf() + "[nonsense]\nx: 1\n", ["unknown section [nonsense]", "general"], id="unknown-section"),
    pytest.param(conf("scheduling backfiling: off"), ["[scheduling]", "unknown option 'backfiling'",
                                                      "backfilling"], id="unknown-option"),
    pytest.param(conf("scheduling backfilling: agressive"), ["[scheduling] backfilling", "'agressive'",
                                                            "off, aggressive, conservative, intermediate"],
                 id="bad-choice"),
    pytest.param(conf("scheduling migration: maybe"), ["[scheduling] migration", "no, yes, yes-notransfer"],
                 id="bad-migration"),
    pytest.param(conf().replace("suspension: all", "suspension: some"), ["[scheduling] suspension",
                                                                        "none, serial-only, all"],
                 id="bad-suspension"),
    pytest.param(conf("scheduling suspension: none"), ["site.conf:", "'suspension'", "already exists"],
                 id="duplicate-option"),
    pytest.param(conf(drop="suspension:"), ["[scheduling] suspension is required"], id="missing-required"),
    pytest.param(conf(drop="starttime:"), ["[simulation] starttime is required"], id="missing-starttime"),
    pytest.param(conf("scheduling backfilling: intermediate"), ["backfilling-reservations is required"],
                 id="intermediate-needs-reservations"),
    pytest.param(conf("scheduling wakeup-interval: soon"), ["[scheduling] wakeup-interval", "HH:MM:SS"],
                 id="bad-duration"),
    pytest.param(conf("scheduling enactment-overhead: -3"), ["[scheduling] enactment-overhead"],
                 id="negative-duration"),
    pytest.param(conf().replace("suspend-rate: 32", "suspend-rate: -32"), ["[scheduling] suspend-rate",
                                                                          "positive"], id="negative-rate"),
    pytest.param(conf().replace("suspend-rate: 32", "suspend-rate: fast"), ["[scheduling] suspend-rate",
                                                                           "not a number"], id="nan-rate"),
    pytest.param(conf() + "[deploy-imagetransfer]\ntransfer-mechanism: broadcast\n",
                 ["[deploy-imagetransfer] transfer-mechanism", "unicast, multicast"], id="bad-transfer-mechanism"),
    pytest.param(conf() + "[deploy-imagetransfer]\ndiskimage-cache-size: -5\n",
                 ["[deploy-imagetransfer] diskimage-cache-size"], id="negative-cache-size"),
    pytest.param(conf("general loglevel: LOUD"), ["[general] loglevel", "STATUS, INFO, DEBUG, VDEBUG"],
                 id="bad-loglevel"),
    pytest.param(conf().replace("mode: simulated", "mode: opennebula"), ["mode: opennebula is not supported"],
                 id="opennebula"),
    pytest.param(conf("accounting probes: ar cpu-usage"), ["[accounting] probes", "'cpu-usage'"],
                 id="unknown-probe"),
    pytest.param(conf().replace("starttime: 2006-11-25 13:00:00", "starttime: yesterday"),
                 ["[simulation] starttime", "ISO"], id="bad-starttime"),
    pytest.param("mode: simulated\n" + conf(), ["site.conf:1", "malformed configuration"], id="no-section-header"),
    pytest.param(conf() + "[general]\nmode: simulated\n", ["malformed configuration", "general"],
                 id="duplicate-section"),
])
def test_bad_configuration_is_named(text, fragments):
    with pytest.raises(InputError) as info:
        parse_config(text, "site.conf")
    message = str(info.value)
    assert message.startswith("site.conf")
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize("resources, fragment", [
    ("4 Memory:1024", "no CPU"),
    ("4 CPU:100", "no Memory"),
    ("four CPU:100 Memory:1024", "number of nodes"),
    ("4 CPU=100 Memory:1024", "TYPE:AMOUNT"),
    ("4 CPU:0 Memory:1024", "positive"),
    ("0 CPU:100 Memory:1024", "positive"),
], ids=["no-cpu", "no-memory", "bad-count", "bad-pair", "zero-amount", "zero-nodes"])
def test_bad_resources_string(cli, tmp_path, resources, fragment):
    (tmp_path / "t.lwf").write_text((INSTANCES / "quickstart" / "quickstart.lwf").read_text())
    path = tmp_path / "site.conf"
    path.write_text(conf().replace("4 CPU:100 Memory:1024", resources).replace("trace.lwf", "t.lwf"))
    proc = cli("simulate", "-c", path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "[simulation] resources" in proc.stderr and fragment in proc.stderr


@pytest.mark.parametrize("args, fragment", [
    (["simulate", "-c", "missing.conf"], "missing.conf: No such file"),
    (["simulate", "-c", "site.conf", "--frobnicate"], "No such option"),
    (["simulate"], "Missing option"),
    (["simulate", "-c", "site.conf", "--tracefile", "nothere.lwf"], "nothere.lwf"),
], ids=["missing-config", "unknown-cli-option", "no-config", "missing-trace"])
def test_cli_errors_are_one_line(cli, tmp_path, args, fragment):
    (tmp_path / "site.conf").write_text(conf())
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("optlease: error:") and proc.stderr.count("\n") == 1
    assert fragment in proc.stderr and "Traceback" not in proc.stderr
