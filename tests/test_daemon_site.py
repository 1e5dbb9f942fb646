"""Where the daemon's site comes from: the resources string, or an LWF file's <site> (in-tracefile)."""
from __future__ import annotations

import pytest

from optlease.engine.daemon_site import site_from_config
from optlease.errors import InputError
from optlease.formats.config import parse_config

from conftest import INSTANCES, simulated_config


def config(resources: str, trace: str = ""):
    return parse_config(simulated_config(resources, tracefile=trace), "daemon.conf", base_dir=INSTANCES)


def test_site_from_resources():
    site = site_from_config(config("3 CPU:200 Memory:2048"))
    assert len(site.nodes) == 3 and site.capacity(3) == {"CPU": 200, "Memory": 2048}


def test_site_from_an_lwf_site():
    site = site_from_config(config("in-tracefile", "haizea/tests/migrate.lwf"))
    assert site.resource_types == ("CPU", "Memory") and len(site.nodes) == 4


@pytest.mark.parametrize("resources, trace, message", [
    ("in-tracefile", "", "needs [tracefile] tracefile"),
    ("in-tracefile", "quickstart/quickstart.lwf", "has no <site>"),
    ("4 CPU:100", "", "no Memory"),
], ids=["no-trace", "trace-without-site", "bad-resources"])
def test_bad_site_sources_are_named(resources, trace, message):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        site_from_config(config(resources, trace))
