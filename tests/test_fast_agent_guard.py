"""The agent obeys only what it should, and answers as migfra does: it touches only the domains it manages, refuses
domains larger than its host, reads hostile payloads without stalling, stops by `regex`, takes `name:` for
`vm-name`, and echoes an id exactly as it was sent. A real mosquitto and libvirt's test driver."""
from __future__ import annotations

import inspect

from optlease.enact import fast
from optlease.enact.agent import Agent
from optlease.enact.agent.owned import OPTLEASE_NAMES

from mqtt_broker import mosquitto  # noqa: F401 - the fixture
from test_agent import agents, domain_xml, probe, run, start_vm, unique  # noqa: F401 - fixtures

BOMB = ("---\nresult: x\nid: bomb\na: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\nb: &b [*a, *a, *a, *a, *a, *a,"
        " *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
        "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
        "task: stop vm\nlist: [{vm-name: *h}]\n---")


def admin_domain(agent, name: str) -> None:
    """A domain somebody else runs on the agent's host."""
    agent.hv.conn.defineXML(domain_xml(name)).create()


def test_the_agent_touches_only_domains_it_manages(probe, agents):  # noqa: F811
    agent = agents("node1", adopt=None)     # adopts nothing: only what it starts is its own
    admin_domain(agent, "test")
    ours = unique()
    start_vm(probe, "node1", ours)
    for task in (fast.StopVm((fast.StopEntry("test", force=True),)), fast.SuspendVm(("test",)),
                 fast.MigrateVm("test", "node2"), fast.StartVm((fast.VmConfig(xml=domain_xml("test")),))):
        result = run(probe, "node1", task)
        assert not result.ok and "not managed by this agent" in result.details, (task.kind, result)
    assert agent.hv.state("test") == "running"
    listed = run(probe, "node1", fast.ListVms())
    assert [v.vm_name for v in listed.vms] == [ours]
    # a stop by regex matching everything stops only what is ours, as migfra answers it: one entry per domain
    stopped = run(probe, "node1", fast.StopVm((fast.StopEntry(None, force=True, undefine=True, regex=".*"),)))
    assert stopped.ok and [v.vm_name for v in stopped.vms] == [ours]
    assert agent.hv.state(ours) == "undefined" and agent.hv.state("test") == "running"


def test_optlease_names_are_adopted(probe, agents):  # noqa: F811
    """A restarted agent still serves its leases' domains: by default (as `optlease agent`) it adopts optlease's
    names."""
    assert inspect.signature(Agent).parameters["adopt"].default == OPTLEASE_NAMES
    agent = agents("node1", adopt=OPTLEASE_NAMES)
    admin_domain(agent, "lease-7-vm-1")
    assert run(probe, "node1", fast.SuspendVm(("lease-7-vm-1",))).ok
    assert agent.hv.state("lease-7-vm-1") == "paused"


def test_a_domain_larger_than_the_host_is_refused_and_not_left_behind(probe, agents):  # noqa: F811
    agent = agents("node1")      # a test node of 4 cpus and 8 GiB
    name = unique()
    for config in (fast.VmConfig(xml=domain_xml(name, vcpus=64)), fast.VmConfig(xml=domain_xml(name), vcpus=64),
                   fast.VmConfig(xml=domain_xml(name, memory_kib=64 * 2**20))):
        result = run(probe, "node1", fast.StartVm((config,)))
        assert not result.ok and "refused" in result.details, result
        assert agent.hv.state(name) == "undefined"


def test_an_alias_bomb_on_the_task_topic_is_answered_at_once(probe, agents):  # noqa: F811
    """519 bytes that expand to 10^8 names: refused before anything is built, and the agent goes on serving."""
    agents("node1")
    probe.publish(fast.task_topic("node1"), BOMB)
    answer = probe.expect(lambda m: m.topic == fast.result_topic("node1"), timeout=10)
    refused = fast.parse_result(answer.payload)
    assert refused.kind == "unknown" and refused.id is None and "aliases are not accepted" in refused.details
    name = unique()
    start_vm(probe, "node1", name)


def test_answers_as_migfra_gives_them(probe, agents):  # noqa: F811
    agent = agents("node1")
    name = unique()
    agent.hv.conn.defineXML(domain_xml(name))
    # `name:` for `vm-name` in a start entry, and an id that a YAML 1.1 reader would take for a boolean
    probe.publish(fast.task_topic("node1"), f"---\ntask: start vm\nvm-configurations:\n  - name: {name}\nid: yes\n---")
    msg = probe.expect(lambda m: m.topic == fast.result_topic("node1"), timeout=10)
    result = fast.parse_result(msg.payload)
    assert result.ok and result.id == "yes" and agent.hv.state(name) == "running"
    assert "id: 'yes'" in msg.payload.decode()      # echoed as the text it was, not `true`


def test_evacuate_node_moves_every_domain_of_ours_as_migfra_answers_it(probe, agents):  # noqa: F811
    src, dst = agents("node1", adopt=None), agents("node2", adopt=None)
    admin_domain(src, "test")
    names = [unique(), unique()]
    for name in names:
        start_vm(probe, "node1", name)
    result = run(probe, "node1", fast.EvacuateNode(("node2",), migration_type="live"))
    assert result.kind == "node evacuated" and result.ok, result
    assert sorted(v.vm_name for v in result.vms) == sorted(names)
    assert all(dst.hv.state(n) == "running" and src.hv.state(n) == "undefined" for n in names)
    assert src.hv.state("test") == "running"          # not ours: it stays
