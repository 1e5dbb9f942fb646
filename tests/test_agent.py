"""The agent against a real mosquitto and libvirt's test driver: results, domain states, migration, bad input, quit,
a broker that restarts, and the `optlease agent` command itself."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import libvirt
import pytest

from optlease.enact import fast
from optlease.enact.agent import Agent, Broker, Hypervisor
from optlease.enact.agent.hypervisor import quiet_libvirt

from mqtt_broker import MOSQUITTO, Mosquitto, Probe, mosquitto  # noqa: F401 - the fixture

REPO = Path(__file__).resolve().parent.parent
NODE_XML = """<node>
  <cpu><nodes>1</nodes><sockets>1</sockets><cores>4</cores><threads>1</threads><active>4</active>
       <mhz>2000</mhz><model>i686</model></cpu>
  <memory>8388608</memory>
</node>
"""


def domain_xml(name: str, memory_kib: int = 262144, vcpus: int = 2) -> str:
    return (f"<domain type='test'>\n  <name>{name}</name>\n  <memory unit='KiB'>{memory_kib}</memory>\n"
            f"  <vcpu>{vcpus}</vcpu>\n  <os><type>hvm</type></os>\n</domain>\n")


ADOPT = r"vm-[0-9a-f]{8}"      # the agents of these tests are told to adopt the domains the tests define


def unique(prefix: str = "vm") -> str:
    # test:///default is one in-memory host for the whole process: names must not collide across tests
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def probe(mosquitto):  # noqa: F811
    p = Probe(mosquitto, ["fast/migfra/+/result", "fast/agent/+/status"])
    yield p
    p.close()


@pytest.fixture
def agents(mosquitto, probe, tmp_path):  # noqa: F811
    """start(host, uri=None, **options): an agent in this process; uri None gives the host its own test node."""
    quiet_libvirt()
    started: list[tuple[Agent, libvirt.virConnect]] = []

    def start(host: str, uri: str | None = None, **options) -> Agent:
        if uri is None:
            node = tmp_path / f"{host}.xml"
            node.write_text(NODE_XML)
            uri = f"test://{node}"
        conn = libvirt.open(uri)
        options.setdefault("adopt", ADOPT)
        agent = Agent(host, Hypervisor(conn), Broker(mosquitto.host, mosquitto.port), **options)
        agent.start()
        started.append((agent, conn))
        # the announcement follows the subscriptions: once it is seen, tasks reach the agent
        probe.expect(lambda m: m.topic == fast.status_topic(host), timeout=10)
        return agent

    yield start
    for agent, conn in started:
        agent.stop()
        conn.close()


def run(probe: Probe, host: str, task, timeout: float = 10.0) -> fast.Result:
    """Publish a task to host and return the result that carries its id."""
    probe.publish(fast.task_topic(host), fast.encode_task(task))
    msg = probe.expect(lambda m: m.topic == fast.result_topic(host) and fast.parse_result(m.payload).id == task.id,
                       timeout)
    return fast.parse_result(msg.payload)


def start_vm(probe, host, name, **config):
    result = run(probe, host, fast.StartVm((fast.VmConfig(xml=domain_xml(name), **config),)))
    assert result.ok, result.details
    return result


# ------------------------------------------------------------------------------------------- single host tasks

def test_agent_announces_itself_with_its_capacity(mosquitto, probe):  # noqa: F811
    conn = libvirt.open("test:///default")
    agent = Agent("node1", Hypervisor(conn), Broker(mosquitto.host, mosquitto.port))
    try:
        agent.start()
        msg = probe.expect(lambda m: m.topic == "fast/agent/node1/status")
        info = conn.getInfo()
    finally:
        agent.stop()
        conn.close()
    status = fast.parse_status(msg.payload)
    assert (status.task, status.source, status.vcpus, status.memory_kib) == ("init", "node1", info[2], info[1] * 1024)
    assert msg.payload.startswith(b"---\n") and msg.payload.endswith(b"\n---")


def test_start_sizes_the_domain_and_runs_it(probe, agents):
    agent = agents("node1", "test:///default")
    name = unique()
    result = start_vm(probe, "node1", name, memory_kib=131072, vcpus=1, time_measurement=True)
    assert result.kind == "vm started" and result.vms[0].vm_name == name
    assert result.vms[0].time_measurement["overall"] >= 0
    dom = agent.hv.conn.lookupByName(name)
    assert agent.hv.state(name) == "running"
    assert dom.info()[1:4] == [131072, 131072, 1]


def test_start_by_name_of_a_defined_domain(probe, agents):
    agent = agents("node1", "test:///default")
    name = unique()
    agent.hv.conn.defineXML(domain_xml(name))
    result = run(probe, "node1", fast.StartVm((fast.VmConfig(vm_name=name),)))
    assert result.ok and agent.hv.state(name) == "running"


@pytest.mark.parametrize("entry, state", [
    ({}, "shut off"), ({"force": True}, "shut off"), ({"force": True, "undefine": True}, "undefined"),
    ({"undefine": True}, "undefined"),
], ids=["shutdown", "destroy", "destroy-undefine", "shutdown-undefine"])
def test_stop(probe, agents, entry, state):
    agent = agents("node1", "test:///default")
    name = unique()
    start_vm(probe, "node1", name)
    result = run(probe, "node1", fast.StopVm((fast.StopEntry(name, **entry),)))
    assert result.kind == "vm stopped" and result.ok, result.details
    assert agent.hv.state(name) == state


def test_suspend_then_resume(probe, agents):
    agent = agents("node1", "test:///default")
    a, b = unique(), unique()
    start_vm(probe, "node1", a)
    start_vm(probe, "node1", b)
    result = run(probe, "node1", fast.SuspendVm((a, b)))
    assert result.kind == "vm suspended" and [v.vm_name for v in result.vms] == [a, b] and result.ok
    assert agent.hv.state(a) == agent.hv.state(b) == "paused"
    result = run(probe, "node1", fast.ResumeVm((a,)))
    assert result.kind == "vm resumed" and result.ok
    assert (agent.hv.state(a), agent.hv.state(b)) == ("running", "paused")


def test_list_vms_leaves_out_a_domain_undefined_while_it_lists(probe, agents):
    """A stop on another worker undefines a domain between the listing and the reading of its state: the answer
    still succeeds, without that domain (an error would read as a host whose domains are all gone)."""
    agent = agents("node1")
    keep, gone = unique(), unique()
    start_vm(probe, "node1", keep)
    start_vm(probe, "node1", gone)
    conn, listing = agent.hv.conn, agent.hv.conn.listAllDomains

    def list_then_stop(flags=0):
        doms = listing(flags)
        dom = conn.lookupByName(gone)
        dom.destroy()
        dom.undefine()
        return doms

    conn.listAllDomains = list_then_stop
    result = run(probe, "node1", fast.ListVms())
    assert result.kind == "vms listed" and result.ok, result.details
    assert [(v.vm_name, v.state) for v in result.vms] == [(keep, "running")]


def test_repin_pins_each_vcpu(probe, agents):
    agent = agents("node1", "test:///default")
    name = unique()
    start_vm(probe, "node1", name)
    result = run(probe, "node1", fast.RepinVm(name, ((1,), (0, 2))))
    assert result.kind == "vm repinned" and result.ok, result.details
    pins = agent.hv.conn.lookupByName(name).vcpuPinInfo(0)
    assert [i for i, on in enumerate(pins[0]) if on] == [1]
    assert [i for i, on in enumerate(pins[1]) if on] == [0, 2]


@pytest.mark.parametrize("make_task, details", [
    (lambda n: fast.StartVm((fast.VmConfig(vm_name="no-such-vm"),)), "Domain not found"),
    (lambda n: fast.StartVm((fast.VmConfig(xml="<domain type='test'><name>broken"),)), "Premature end"),
    (lambda n: fast.StartVm((fast.VmConfig(xml=domain_xml(n)),)), "already running"),
    (lambda n: fast.ResumeVm((n,)), "not paused"),
    (lambda n: fast.SuspendVm(("no-such-vm",)), "Domain not found"),
    (lambda n: fast.StopVm((fast.StopEntry("no-such-vm"),)), "Domain not found"),
    (lambda n: fast.RepinVm(n, ((99,),)), "CPU 99 does not exist"),
    (lambda n: fast.RepinVm(n, ((0,), (0,), (0,))), "vcpu '2' is not present"),
], ids=["start-unknown", "start-bad-xml", "start-twice", "resume-running", "suspend-unknown", "stop-unknown",
        "repin-no-such-cpu", "repin-too-many-vcpus"])
def test_libvirt_refusals_become_status_error_with_the_message(probe, agents, make_task, details):
    agents("node1", "test:///default")
    name = unique()
    start_vm(probe, "node1", name)
    task = make_task(name)
    result = run(probe, "node1", task)
    assert result.kind == task.result_kind and result.id == task.id
    assert [v.status for v in result.vms] == ["error"] and details in result.details


def test_huge_memory_on_a_real_domain_is_an_error_not_a_crash(probe, agents):
    agent = agents("node1", "test:///default")
    name = unique()
    agent.hv.conn.defineXML(domain_xml(name))
    result = run(probe, "node1", fast.StartVm((fast.VmConfig(vm_name=name, memory_kib=2**64 - 1),)))
    assert not result.ok and "refused" in result.details
    assert run(probe, "node1", fast.SuspendVm(("no-such-vm",))).kind == "vm suspended"   # still serving


def test_a_stop_entry_without_name_fails_alone(probe, agents):
    agent = agents("node1", "test:///default")
    name = unique()
    start_vm(probe, "node1", name)
    result = run(probe, "node1", fast.StopVm((fast.StopEntry(None), fast.StopEntry(name, force=True))))
    assert [v.status for v in result.vms] == ["error", "success"]
    assert agent.hv.state(name) == "shut off"


# Payloads the agent cannot parse: each gets `result: unknown`, a details line, and no id.
UNPARSABLE = [
    pytest.param(b"", "empty payload", id="empty"),
    pytest.param(b"task: [start", "bad YAML", id="bad-yaml"),
    pytest.param(b"\xff\xfe\x00\x01", "UTF-8", id="binary"),
    pytest.param(b"---\nvm-name: a\nid: t-x\n---", 'key "task"', id="no-task-key"),
    pytest.param(b"---\ntask: reboot vm\nid: t-x\n---", "Unknown type", id="unknown-task"),
    pytest.param(b"---\ntask: migrate vm\nvm-name: a\nid: t-x\n---", "destination", id="missing-destination"),
    pytest.param(b"---\ntask: start vm\nid: t-x\nvm-configurations:\n- {vm-name: a, memory: lots}\n---", "memory",
                 id="memory-lots"),
    pytest.param(b"---\ntask: start vm\nid: t-x\nvm-configurations:\n- {vm-name: a, vcpus: 1e400}\n---", "vcpus",
                 id="vcpus-inf"),
    pytest.param(b"---\ntask: start vm\nid: t-x\nvm-configurations:\n- {vm-name: a, memory: 123456789012345678901}"
                 b"\n---", "out of range", id="memory-huge"),
    pytest.param(b"- task: quit", "mapping", id="list"),
]


@pytest.mark.parametrize("payload, details", UNPARSABLE)
def test_unparsable_tasks_get_result_unknown_without_id(probe, agents, payload, details):
    agents("node1", "test:///default")
    probe.publish(fast.task_topic("node1"), payload)
    msg = probe.expect(lambda m: m.topic == fast.result_topic("node1"))
    assert msg.payload.startswith(b"---\n") and msg.payload.endswith(b"\n---")
    result = fast.parse_result(msg.payload)
    assert result.kind == "unknown" and result.id is None and details in result.details
    follow_up = run(probe, "node1", fast.SuspendVm(("no-such-vm",)))     # the agent is still there
    assert follow_up.kind == "vm suspended"


def test_empty_container_is_unknown_but_keeps_the_id(probe, agents):
    agents("node1", "test:///default")
    probe.publish(fast.task_topic("node1"), b"---\ntask: start vm\nid: t-empty\nvm-configurations: []\n---")
    result = fast.parse_result(probe.expect(lambda m: m.topic == fast.result_topic("node1")).payload)
    assert (result.kind, result.id, result.details) == ("unknown", "t-empty", "Empty task container executed.")


def test_quit_answers_and_ends_the_agent(probe, agents):
    agent = agents("node1", "test:///default")
    task = fast.Quit()
    result = run(probe, "node1", task)
    assert (result.kind, result.id) == ("quit", task.id)
    assert agent.wait(5)
    probe.publish(fast.task_topic("node1"), fast.encode_task(fast.SuspendVm(("x",))))
    assert [m for m in probe.quiet(0.5) if m.topic == fast.result_topic("node1")] == []


def test_a_slow_task_does_not_hold_back_a_quick_one(probe, agents):
    agents("node1", "test:///default", handoff_timeout=2.0)
    name = unique()
    start_vm(probe, "node1", name)
    slow = fast.MigrateVm(name, "nowhere", "live")         # waits for a destination that never answers
    quick = fast.SuspendVm((name,))
    probe.publish(fast.task_topic("node1"), fast.encode_task(slow))
    probe.publish(fast.task_topic("node1"), fast.encode_task(quick))
    first = fast.parse_result(probe.expect(lambda m: m.topic == fast.result_topic("node1")).payload)
    second = fast.parse_result(probe.expect(lambda m: m.topic == fast.result_topic("node1"), timeout=10).payload)
    assert (first.id, second.id) == (quick.id, slow.id)
    assert "nowhere" in second.details


# ------------------------------------------------------------------------------------------------- migration

@pytest.mark.parametrize("kind, before, after", [
    ("live", "running", "running"), ("live", "paused", "paused"), ("warm", "running", "running"),
    ("warm", "paused", "paused"), ("offline", "shut off", "shut off"),
], ids=["live", "live-paused", "warm", "warm-paused", "offline"])
def test_migration_moves_the_domain_to_the_destination(probe, agents, kind, before, after):
    src, dst = agents("src"), agents("dst")
    name = unique()
    src.hv.conn.defineXML(domain_xml(name))
    if before != "shut off":
        src.hv.conn.lookupByName(name).create()
    if before == "paused":
        src.hv.conn.lookupByName(name).suspend()
    task = fast.MigrateVm(name, "dst", kind, time_measurement=True)
    result = run(probe, "src", task)
    assert result.kind == "vm migrated" and result.id == task.id and result.ok, result.details
    assert result.vms[0].time_measurement["overall"] >= 0
    assert (src.hv.state(name), dst.hv.state(name)) == ("undefined", after)
    assert dst.hv.conn.lookupByName(name).isPersistent()
    assert dst.hv.conn.lookupByName(name).info()[1] == 262144


@pytest.mark.parametrize("kind", ["live", "warm"])
def test_transient_domains_migrate_transient_with_their_vcpu_map(probe, agents, kind):
    src, dst = agents("src"), agents("dst")
    name = unique()
    src.hv.conn.createXML(domain_xml(name), 0)
    result = run(probe, "src", fast.MigrateVm(name, "dst", kind, vcpu_map=((2,), (3,))))
    assert result.ok, result.details
    dom = dst.hv.conn.lookupByName(name)
    assert (src.hv.state(name), dst.hv.state(name), dom.isPersistent()) == ("undefined", "running", False)
    assert [[i for i, on in enumerate(cpus) if on] for cpus in dom.vcpuPinInfo(0)] == [[2], [3]]


def test_stopping_a_transient_domain_with_undefine_succeeds(probe, agents):
    agent = agents("node1", "test:///default")
    name = unique()
    start_vm(probe, "node1", name, transient=True)
    result = run(probe, "node1", fast.StopVm((fast.StopEntry(name, undefine=True),)))
    assert result.ok, result.details
    assert agent.hv.state(name) == "undefined"


@pytest.mark.parametrize("kind, state", [("live", "running"), ("warm", "running"), ("warm", "paused")],
                         ids=["live", "warm", "warm-paused"])
def test_migration_to_a_silent_destination_fails_and_keeps_the_domain(probe, agents, kind, state):
    src = agents("src", handoff_timeout=1.0)
    name = unique()
    src.hv.conn.defineXML(domain_xml(name))
    src.hv.conn.lookupByName(name).create()
    if state == "paused":
        src.hv.conn.lookupByName(name).suspend()
    result = run(probe, "src", fast.MigrateVm(name, "nowhere", kind))
    assert not result.ok and "no agent for destination nowhere" in result.details
    assert src.hv.state(name) == state


def test_destination_that_already_has_the_name_refuses(probe, agents):
    src, dst = agents("src"), agents("dst")
    name = unique()
    src.hv.conn.createXML(domain_xml(name), 0)
    dst.hv.conn.defineXML(domain_xml(name, memory_kib=1024))
    result = run(probe, "src", fast.MigrateVm(name, "dst", "warm"))
    assert not result.ok and "already exists" in result.details
    assert (src.hv.state(name), dst.hv.state(name)) == ("running", "shut off")
    assert dst.hv.conn.lookupByName(name).info()[1] == 1024


@pytest.mark.parametrize("task, details", [
    (lambda n: fast.MigrateVm(n, "dst", "offline"), "offline migration moves only"),
    (lambda n: fast.MigrateVm(n, "src", "live"), "is this host"),
    (lambda n: fast.MigrateVm(n, "dst", "live", swap_with=fast.SwapWith("other")), "swap-with"),
    (lambda n: fast.MigrateVm("no-such-vm", "dst", "live"), "Domain not found"),
], ids=["offline-running", "to-itself", "swap-with", "unknown-domain"])
def test_migrations_refused_before_anything_moves(probe, agents, task, details):
    src, dst = agents("src"), agents("dst")
    name = unique()
    src.hv.conn.createXML(domain_xml(name), 0)
    result = run(probe, "src", task(name))
    assert result.kind == "vm migrated" and not result.ok and details in result.details
    assert (src.hv.state(name), dst.hv.state(name)) == ("running", "undefined")


def test_libvirt_migration_errors_are_reported(probe, agents):
    src = agents("src", "test:///default", migrate_uri="test:///default?{host}")
    name = unique()
    start_vm(probe, "src", name)
    result = run(probe, "src", fast.MigrateVm(name, "dst", "live"))
    assert not result.ok and "migration" in result.details
    assert src.hv.state(name) == "running"


# ------------------------------------------------------------------------------------------ broker going away

def test_agent_survives_a_broker_restart(mosquitto, probe, agents):  # noqa: F811
    agent = agents("node1", "test:///default")
    name = unique()
    start_vm(probe, "node1", name)
    mosquitto.stop()
    time.sleep(0.5)
    mosquitto.start()
    probe.wait_subscribed(2, timeout=20)
    # both clients reconnect on their own schedules: ping until the agent answers again (bounded), then act
    deadline = time.monotonic() + 20
    while True:
        try:
            run(probe, "node1", fast.ResumeVm(("no-such-vm",)), timeout=2)
            break
        except TimeoutError:
            if time.monotonic() > deadline:
                raise
    result = run(probe, "node1", fast.SuspendVm((name,)))
    assert result.ok and agent.hv.state(name) == "paused"


# ------------------------------------------------------------------------------------------------- the command

def optlease(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "optlease.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("args, message", [
    (["--host", "a/b"], "--host: bad host name"),
    (["--host", "n1", "--broker", "localhost:notaport"], "--broker: bad broker address"),
    (["--host", "n1", "--broker", "localhost:70000"], "port must be 1..65535"),
    (["--host", "n1", "--password", "secret"], "--password: a password needs a --username"),
    (["--host", "n1", "--tls-ca", "/no/such/ca.pem"], "does not exist"),
    (["--host", "n1", "--migrate-uri", "qemu+ssh://dest/system"], "{host}"),
    (["--broker", "localhost:1883"], "Missing option '--host'"),
    (["--host", "n1", "--adopt", "lease-(["], "--adopt: not a regular expression"),
    (["--host", "n1", "--broker", "localhost:1883"], "--broker: neither --username nor --tls-ca"),
    (["--host", "n1", "--heartbeat", "-1"], "'--heartbeat'"),
    # a wait longer than the platform's timers would kill the heartbeat thread (Event.wait(inf) overflows)
    (["--host", "n1", "--heartbeat", "inf"], "less than or equal to 86400"),
    (["--host", "n1", "--heartbeat", "nan"], "'--heartbeat'"),
], ids=["host-slash", "port-text", "port-range", "password-alone", "tls-ca-missing", "migrate-uri", "no-host",
        "adopt-pattern", "open-broker", "heartbeat-negative", "heartbeat-inf", "heartbeat-nan"])
def test_bad_options_give_one_line_and_exit_2(args, message):
    # --insecure where the option under test is not the broker's: each case fails on its own option
    done = optlease("agent", *args, *([] if "neither" in message else ["--insecure"]))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("optlease: error:") and message in done.stderr


@pytest.mark.parametrize("args, message", [
    (["--broker", f"127.0.0.1:{1}"], "cannot reach MQTT broker 127.0.0.1:1"),
    (["--libvirt", "nosuchdriver:///x"], "cannot open libvirt nosuchdriver:///x"),
], ids=["broker-down", "libvirt-unknown"])
def test_unreachable_outside_world_gives_one_line_and_exit_1(args, message):
    done = optlease("agent", "--host", "n1", "--libvirt", "test:///default", "--insecure", *args)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(MOSQUITTO is None, reason="the mosquitto broker binary is not installed")
def test_a_broker_that_refuses_us_gives_one_line_and_exit_1(tmp_path):
    locked = Mosquitto(tmp_path, allow_anonymous=False)
    locked.start()
    try:
        done = optlease("agent", "--host", "n1", "--libvirt", "test:///default", "--broker", locked.address,
                        "--insecure")
    finally:
        locked.stop()
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "refused the connection: Not authorized" in done.stderr


def agent_process(host: str, broker: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "optlease.cli.main", "agent", "--host", host,
                             "--libvirt", "test:///default", "--broker", broker, "--insecure"],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigterm_ends_the_agent_process_cleanly(mosquitto, probe):  # noqa: F811
    proc = agent_process("p1", mosquitto.address)
    try:
        probe.expect(lambda m: m.topic == fast.status_topic("p1"), timeout=20)
        assert run(probe, "p1", fast.SuspendVm(("no-such-vm",))).kind == "vm suspended"
        proc.terminate()
        assert proc.wait(10) == 0
        assert proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_agent_processes_migrate_between_separate_test_default_hosts(mosquitto, probe):  # noqa: F811
    """Two `optlease agent` processes, each with its own test:///default: the domain moves between them."""
    procs = {host: agent_process(host, mosquitto.address) for host in ("p1", "p2")}
    try:
        announced: set[str] = set()
        while announced != set(procs):      # in either order: expect() drops what it is not waiting for
            announced.add(fast.host_of_topic(probe.expect(lambda m: m.topic.startswith("fast/agent/"), 20).topic))
        name = unique()
        start_vm(probe, "p1", name)
        assert run(probe, "p1", fast.MigrateVm(name, "p2", "warm")).ok
        # only p2 knows the domain now: suspending works there and fails on p1
        assert run(probe, "p2", fast.SuspendVm((name,))).ok
        gone = run(probe, "p1", fast.SuspendVm((name,)))
        assert not gone.ok and "Domain not found" in gone.details
        for host in procs:
            assert run(probe, host, fast.Quit()).kind == "quit"
        for host, proc in procs.items():
            assert proc.wait(10) == 0, proc.stderr.read()
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
