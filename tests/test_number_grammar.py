"""Every number a user writes has one strict grammar (ASCII digits, no sign, no underscores, bounded), in lease
XML, configuration files, resource strings and on the command line; and configuration values that would stall or
kill the daemon are refused when the file is read, in one line naming file, section, option and allowed range."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from optlease.cli.main import main
from optlease.domain.site import Site
from optlease.engine.api import parse_lease_xml
from optlease.engine.daemon_site import site_from_config
from optlease.errors import InputError
from optlease.formats.config import parse_config
from optlease.formats.daemon_config import daemon_config
from optlease.numbers import parse_decimal, parse_whole

SITE = Site.parse_resources("4 CPU:100 Memory:1024")
LEASE = ('<lease><nodes><node-set numnodes="{n}"><res type="CPU" amount="{cpu}"/><res type="Memory" '
         'amount="512"/></node-set></nodes><start>{start}</start><duration time="{dur}"/>'
         '<software><disk-image id="a.img" size="{size}"/></software></lease>')
GOOD = {"n": "1", "cpu": "100", "start": "", "dur": "00:30:00", "size": "1024"}
# what int() or float() take that no user means: a sign, underscores, other scripts' digits, superscripts
HOSTILE_WHOLE = ["+5", "1_0", "\u0663", "\u0661\u0660", "\u00b2", "\uff15", "1e3", "0x10", "5.0", "- 5"]


def lease(**changes: str) -> str:
    return LEASE.format(**{**GOOD, **changes})


def refusal(xml: str) -> str:
    from datetime import datetime

    with pytest.raises(InputError) as info:
        parse_lease_xml(xml, 1, 0, datetime(2026, 1, 1), SITE)
    message = str(info.value)
    assert "\n" not in message and "class" not in message and "Error" not in message, message
    return message


@pytest.mark.parametrize("raw", HOSTILE_WHOLE)
@pytest.mark.parametrize("field, attribute", [("n", "numnodes"), ("cpu", "amount"), ("size", "size")])
def test_lease_xml_counts_and_amounts_take_ascii_digits_only(field, attribute, raw):
    assert f"{attribute}='{raw}' is not a whole number" in refusal(lease(**{field: raw}))


def test_a_signed_node_count_no_longer_skips_the_site_check():
    """numnodes="+5" used to pass the site check (made on the text) and run 5 VMs on a 4-node site."""
    assert "numnodes" in refusal(lease(n="+5"))
    assert "the site has 4" in refusal(lease(n="5"))


@pytest.mark.parametrize("size", ["1" + "0" * 30, "2147483648"])
def test_image_sizes_past_32_bits_are_refused(size):
    assert "size=" in refusal(lease(size=size)) and "too large" in refusal(lease(size=size))


@pytest.mark.parametrize("duration", ["1_0:00:00", "\u0661:00:00", "00:00:1e1", "00:00:nan", "00:\u00b2:00",
                                      "+5:00:00:00:00", "00:00:00:00:00", "00: 30:00", "00:30:00."])
def test_durations_take_ascii_digits_only(duration):
    assert "is not a duration" in refusal(lease(dur=duration))


@pytest.mark.parametrize("start", ['<exact time="+1_0:00:00"/>', '<exact time="+\u0661:00:00:00"/>',
                                   '<exact time="\u0662\u0660\u0662\u0667-01-01 00:00:00"/>'])
def test_start_times_take_ascii_digits_only(start):
    assert "time" in refusal(lease(start=start)) or "duration" in refusal(lease(start=start))


@given(st.text(max_size=12))
def test_whole_numbers_are_read_from_ascii_digits_only(text):
    try:
        value = parse_whole(text, None)
    except ValueError:
        return
    assert set(text) <= set("-0123456789") and value == int(text)


@given(st.integers(min_value=0, max_value=10**30))
def test_every_ascii_whole_number_is_read(number):
    assert parse_whole(str(number), None) == number


@given(st.text(alphabet="0123456789.eE-+_ naif\u0663\u00b2", max_size=10))
def test_decimals_are_finite_and_written_in_ascii(text):
    try:
        value = parse_decimal(text, None)
    except ValueError:
        return
    assert value == float(text) and set(text) <= set("-0123456789.eE")


# -- configuration ---------------------------------------------------------------------------------------------

def config(scheduling=None, simulation=None, mqtt=None, resources="4 CPU:100 Memory:1024") -> str:
    return daemon_config(port=42493, persistence_file="none", resources=resources, mode="simulated",
                         scheduling={"suspension": "none", **(scheduling or {})}, simulation=simulation, mqtt=mqtt)


def config_refusal(text: str) -> str:
    with pytest.raises(InputError) as info:
        cfg = parse_config(text, "site.conf")
        site_from_config(cfg)
    message = str(info.value)
    assert message.startswith("site.conf: ") and "\n" not in message, message
    return message


@pytest.mark.parametrize("where, option, raw", [
    ("scheduling", "backfilling-reservations", "+5"), ("scheduling", "backfilling-reservations", "1_0"),
    ("scheduling", "suspend-rate", "\u0663"), ("scheduling", "suspend-rate", "1_0.5"),
    ("scheduling", "wakeup-interval", "\u0666\u0660"), ("scheduling", "wakeup-interval", "+60"),
    ("mqtt", "port", "\u00b2"), ("mqtt", "task-timeout", "inf"),
])
def test_config_numbers_take_ascii_digits_only(where, option, raw):
    message = config_refusal(config(**{where: {option: raw}}))
    assert f"[{where}] {option}: '{raw}' is not a" in message


@pytest.mark.parametrize("where, option, raw", [
    ("simulation", "time-scale", "1e-300"), ("simulation", "time-scale", "1e308"),
    ("simulation", "time-scale", "0.0001"), ("scheduling", "wakeup-interval", "100000000000000000000"),
    ("scheduling", "wakeup-interval", "2:00:00:00"), ("scheduling", "non-schedulable-interval", "1000000"),
    ("mqtt", "port", "70000"), ("mqtt", "port", "0"), ("mqtt", "keepalive", "65536"),
    ("mqtt", "task-timeout", "1e9"), ("mqtt", "host-timeout", "1e9"), ("mqtt", "hosts-wait", "86400"),
])
def test_config_values_out_of_range_are_refused_at_load(where, option, raw):
    message = config_refusal(config(**{where: {option: raw}}))
    assert f"[{where}] {option}: " in message and "allowed: " in message, message


@pytest.mark.parametrize("resources, fragment", [
    ("10000000 CPU:100 Memory:1024", "10000000 is too large (allowed: 1 to 100000)"),
    ("1000000000000 CPU:100 Memory:1024", "is too large"),
    ("4 CPU:1000000000000 Memory:1024", "resource CPU: amount 1000000000000 is too large"),
    ("+4 CPU:100 Memory:1024", "'+4' is not a whole number"),
    ("4 CPU:1_00 Memory:1024", "'1_00' is not a whole number"),
])
def test_resource_counts_and_capacities_are_bounded(resources, fragment):
    message = config_refusal(config(resources=resources))
    assert "[simulation] resources" in message and fragment in message, message


def test_values_at_the_bounds_are_accepted():
    cfg = parse_config(config(simulation={"time-scale": "0.001"}, mqtt={"port": "65535", "keepalive": "65535"},
                              scheduling={"wakeup-interval": "1:00:00:00"}), "site.conf")
    assert cfg.get("simulation", "time-scale") == 0.001 and cfg.get("mqtt", "port") == 65535
    assert len(site_from_config(parse_config(config(resources="100000 CPU:1 Memory:1"), "x")).nodes) == 100000


@pytest.mark.parametrize("option, name, fragment", [
    ("policy-admission", "os.getcwd", "'os.getcwd' is not a policy class (a class with accept())"),
    ("policy-preemption", "optlease.scheduling.policies.NoARs", "a class with score()"),
    ("policy-host-selection", "optlease.scheduling.policies.Policies", "a class with score()"),
    ("policy-admission", "no.such.module.Policy", "cannot load policy"),
])
def test_policies_by_dotted_path_must_be_classes_with_the_right_methods(option, name, fragment):
    message = config_refusal(config(scheduling={option: name}))
    assert f"[scheduling] {option}: " in message and fragment in message, message


def test_a_policy_class_with_the_right_methods_is_accepted():
    cfg = parse_config(config(scheduling={"policy-admission": "optlease.scheduling.policies.NoARs"}), "x")
    assert cfg.get("scheduling", "policy-admission") == "optlease.scheduling.policies.NoARs"


# -- command line --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, option", [
    (["request-lease", "-t", "now", "-d", "00:10:00", "-n", "+5"], "'-n'"),
    (["request-lease", "-t", "now", "-d", "00:10:00", "-n", "1_0"], "'-n'"),
    (["request-lease", "-t", "now", "-d", "00:10:00", "-n", "\u0663"], "'-n'"),
    (["request-lease", "-t", "now", "-d", "00:10:00", "-n", "1", "-c", "\u00b2"], "'-c'"),
    (["request-lease", "-t", "now", "-d", "00:10:00", "-n", "1", "-c", "0"], "'-c'"),
    (["request-lease", "-t", "now", "-d", "00:10:00", "-n", "1", "-m", "+512"], "'-m'"),
    (["request-lease", "-t", "now", "-d", "00:10:00", "-n", "1", "-i", "a", "-z", "1" + "0" * 30], "'-z'"),
    (["cancel-lease", "-l", "1_0"], "'-l'"),
])
def test_cli_numbers_take_ascii_digits_only(capsys, args, option):
    assert main([*args, "-s", "http://127.0.0.1:9"]) == 2      # refused before any connection is tried
    err = capsys.readouterr().err
    assert err.startswith("optlease: error: ") and err.count("\n") == 1 and option in err, err
    assert "cannot reach" not in err
