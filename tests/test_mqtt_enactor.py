"""The MQTT enactor against a real mosquitto and real agents on libvirt test hosts: reconciled plans really change
the domains (start, swap, suspend, resume elsewhere, stop), an agent's error, a host nobody serves, announcements and
silence, malformed messages, and a broker that restarts under it."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import libvirt
import pytest

from optlease.enact import fast
from optlease.enact.agent import Agent, Broker, Hypervisor
from optlease.enact.agent.hypervisor import quiet_libvirt
from optlease.enact.base import VmTask, vm_name
from optlease.enact.mqtt import MqttEnactor
from optlease.enact.mqtt_jobs import minimal_domain_xml
from optlease.formats.config import parse_config
from optlease.formats.daemon_config import daemon_config
from optlease.reconcile import ABSENT, RUNNING, SUSPENDED, VmPlacement, reconcile

from conftest import wait_until
from mqtt_broker import Probe, free_port, mosquitto  # noqa: F401 - the fixture

NODE_XML = """<node>
  <cpu><nodes>1</nodes><sockets>1</sockets><cores>4</cores><threads>1</threads><active>4</active>
       <mhz>2000</mhz><model>i686</model></cpu>
  <memory>8388608</memory>
</node>
"""
A, B = vm_name(1, 1), vm_name(2, 1)
LIBVIRT_STATE = {RUNNING: "running", SUSPENDED: "paused"}


@pytest.fixture
def enactor(mosquitto):  # noqa: F811
    """make(**options): an enactor on the test broker (made before the agents, so it hears their announcements)."""
    made: list[MqttEnactor] = []

    def make(**options) -> MqttEnactor:
        options.setdefault("task_timeout", 5.0)
        options.setdefault("domain_xml", lambda t: minimal_domain_xml(t, "test"))
        e = MqttEnactor(mosquitto.host, mosquitto.port, connect_timeout=10, **options)
        assert e.connected
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


@pytest.fixture
def agents(mosquitto, tmp_path: Path):  # noqa: F811
    """start(*hosts): one in-process agent per host, each on its own libvirt test node."""
    quiet_libvirt()
    started: list[tuple[Agent, libvirt.virConnect]] = []

    def start(*hosts: str) -> dict[str, Agent]:
        out = {}
        for host in hosts:
            node = tmp_path / f"{host}.xml"
            node.write_text(NODE_XML)
            conn = libvirt.open(f"test://{node}")
            agent = Agent(host, Hypervisor(conn), Broker(mosquitto.host, mosquitto.port))
            agent.start()
            started.append((agent, conn))
            out[host] = agent
        return out

    yield start
    for agent, conn in started:
        agent.stop()
        conn.close()


def settle(e: MqttEnactor, tasks: list[VmTask], timeout: float = 20.0):
    e.submit(tasks)
    assert e.wait_idle(timeout), "tasks did not settle in time"
    return e.outcomes()


def domains(agents: dict[str, Agent]) -> dict[str, tuple[str, str]]:
    """What libvirt really holds: vm -> (host, state), for the domains that exist."""
    out = {}
    for host, agent in agents.items():
        for dom in agent.hv.conn.listAllDomains(0):
            out[dom.name()] = (host, agent.hv.state(dom.name()))
    return out


# ---------------------------------------------------------------------------------------------- real changes

def vm(host, state=RUNNING):
    return VmPlacement(host if state != ABSENT else None, state, vcpus=4, memory_mb=256)


PLANS = [
    ("start", {A: vm("h1"), B: vm("h2")}),
    ("swap", {A: vm("h2"), B: vm("h1")}),            # both hosts full (4 vcpus each): a swap, two migrations
    ("suspend", {A: vm("h2", SUSPENDED), B: vm("h1")}),
    ("resume-elsewhere", {A: vm("h3"), B: vm("h1")}),  # the paused image moves warm, then resumes on h3
    ("stop", {}),
]


def test_reconciled_plans_really_change_the_domains(enactor, agents):
    e = enactor()
    hosts = agents("h1", "h2", "h3")
    assert e.wait_hosts(hosts, 10)
    assert e.hosts()["h1"].capacity == {"vcpus": 4, "memory_mb": 8192}
    for step, desired in PLANS:
        b = reconcile(e.running(), desired, e.hosts(), "live")
        assert b.tasks and not b.lost, step
        if step == "swap":
            assert [t.swap_with for t in b.migrate] == [B]
        outcomes = settle(e, b.tasks)
        assert {o.task for o in outcomes} == set(b.tasks)
        assert all(o.ok for o in outcomes), (step, outcomes)
        expected = {name: (p.host, LIBVIRT_STATE[p.state]) for name, p in desired.items()}
        assert domains(hosts) == expected, step
        assert e.running() == expected, step


def test_an_error_answer_is_a_failed_outcome_and_later_waves_are_skipped(enactor, agents):
    e = enactor()
    agents("h1")
    assert e.wait_hosts(["h1"], 10)
    start = VmTask("start", 7, 1, "h1", vcpus=1, memory_mb=128)
    assert [o.ok for o in settle(e, [start])] == [True]
    # a VM of that name already runs there: the agent answers status: error, and wave 1 is never sent
    again = settle(e, [start, VmTask("suspend", 7, 1, "h1", wave=1)])
    by_kind = {o.task.kind: o for o in again}
    assert not by_kind["start"].ok and "already running" in by_kind["start"].details
    assert by_kind["suspend"].skipped and not by_kind["suspend"].ok
    assert e.running() == {vm_name(7, 1): ("h1", "running")}


def test_an_inventory_answered_error_keeps_what_the_host_runs(enactor, agents, mosquitto):  # noqa: F811
    """A `list vms` answered `error` lists nothing: the host's domains are not taken for gone (the next pass would
    start them again, or give up a suspended one as lost)."""
    e = enactor()
    hosts = agents("h1")
    assert e.wait_hosts(hosts, 10) and e.wait_inventory(hosts, 10)
    assert [o.ok for o in settle(e, [VmTask("start", 1, 1, "h1")])] == [True]
    listed = e.listed["h1"]

    def broken():
        raise libvirt.libvirtError("cannot list the domains")

    hosts["h1"].hv.list_vms = broken
    probe = Probe(mosquitto, [fast.result_topic("h1")])
    try:
        e.request_inventory(["h1"])
        answer = fast.parse_result(probe.expect(lambda m: fast.parse_result(m.payload).kind == "vms listed").payload)
    finally:
        probe.close()
    assert not answer.ok
    # the host's results reach the enactor in order: once the next task has settled, the error answer was read
    assert [o.ok for o in settle(e, [VmTask("start", 2, 1, "h1")])] == [True]
    assert e.running() == {A: ("h1", "running"), B: ("h1", "running")}
    assert e.listed["h1"] == listed


class PlayedHost:
    """The test plays host h1: it reads the tasks sent to it and answers each when and as the test says."""

    def __init__(self, broker) -> None:
        self.probe = Probe(broker, [fast.task_topic("h1")])

    def next(self, kind: str) -> fast.Task:
        """The next task of `kind` sent to h1 (probes and other tasks are passed over)."""
        while True:
            task = fast.parse_task(self.probe.expect(lambda m: bool(tasks_in([m]))).payload)
            if task.kind == kind:
                return task

    def answer(self, task: fast.Task, *vms: fast.VmResult) -> None:
        self.probe.publish(fast.result_topic("h1"), fast.Result(task.result_kind, vms, task.id).encode(), qos=1)

    def close(self) -> None:
        self.probe.close()


@pytest.mark.parametrize("kind", ["start", "stop"])
def test_an_inventory_taken_before_a_task_ran_but_read_after_its_result_changes_nothing(enactor, mosquitto,
                                                                                         kind):  # noqa: F811
    """An agent runs each task in its own thread, so its results can come out of order (as migfra's): a `list vms`
    it read before a start (or a stop) ran may be answered after that task's result. Such a listing is older than
    the result: the VM stays as the result left it (read as the host's truth, a VM just started would look gone and
    be started again, a VM just stopped would look running and be stopped again)."""
    host = PlayedHost(mosquitto)
    try:
        # the played host answers no probe: a task timeout longer than the test keeps it alive however slow the
        # machine
        e = enactor(hosts=("h1",), task_timeout=60.0)
        host.answer(host.next("list vms"))                 # the first inventory: h1 runs nothing
        assert e.wait_inventory(["h1"], 10)
        if kind == "stop":
            e.submit([VmTask("start", 1, 1, "h1")])
            host.answer(host.next("start vm"), fast.VmResult(A, fast.SUCCESS))
            assert e.wait_idle(10) and e.running() == {A: ("h1", "running")}
        listed = e.listed["h1"]
        e.request_inventory(["h1"])
        asked = host.next("list vms")                      # h1 lists its domains now ...
        e.submit([VmTask(kind, 1, 1, "h1")])
        host.answer(host.next(f"{kind} vm"), fast.VmResult(A, fast.SUCCESS))
        assert e.wait_idle(10) and [o.ok for o in e.outcomes()][-1]
        want = e.running()
        assert want == ({A: ("h1", "running")} if kind == "start" else {})
        # ... and its answer, taken before the task ran, comes after the task's result
        host.answer(asked, *([] if kind == "start" else [fast.VmResult(A, fast.SUCCESS, state="running")]))
        wait_until(lambda: e.listed["h1"] != listed, 10, "the late inventory read")
        assert e.running() == want
        # a listing asked after the result is the host's word
        e.request_inventory(["h1"])
        host.answer(host.next("list vms"), fast.VmResult(A, fast.SUCCESS, state="paused"))
        wait_until(lambda: e.running() != want, 10, "the next inventory read")
        assert e.running() == {A: ("h1", "paused")}
    finally:
        host.close()


def test_a_host_without_agent_times_out_after_the_retries(enactor, mosquitto):  # noqa: F811
    """On the enactor's clock, driven here: a copy goes out each time the one before has waited its task timeout,
    three in all, each with a fresh id, and the task settles as timed out once the third has waited too, not
    before."""
    now = [1000.0]
    e = enactor(task_timeout=0.5, task_retries=2, clock=lambda: now[0])
    probe = Probe(mosquitto, ["fast/migfra/ghost/task"])

    def task_sent():
        # the next task on the topic (probes, empty start containers asking if it is there, are passed over)
        return fast.parse_task(probe.expect(lambda m: bool(tasks_in([m]))).payload)

    try:
        e.submit([VmTask("start", 1, 1, "ghost")])
        ids = [task_sent().id]
        for _ in range(2):
            assert e.busy() and e.outcomes() == []
            now[0] += 0.5
            ids.append(task_sent().id)
        assert e.busy() and e.outcomes() == []
        now[0] += 0.5
        assert e.wait_idle(10)
        (outcome,) = e.outcomes()
        sent = probe.quiet(0.2)
    finally:
        probe.close()
    assert not outcome.ok and outcome.timed_out and "after 3 attempts" in outcome.details
    assert len(set(ids)) == 3 and tasks_in(sent) == []


def tasks_in(messages) -> list:
    """The tasks among messages on task topics, probes left out."""
    out = []
    for m in messages:
        try:
            out.append(fast.parse_task(m.payload))
        except fast.FastProtocolError as exc:
            assert exc.message == fast.EMPTY_CONTAINER, exc
    return out


# ------------------------------------------------------------------------------------------- hosts and noise

def test_announcements_silence_and_malformed_messages(enactor, agents, mosquitto):  # noqa: F811
    e = enactor(host_timeout=1.0)
    probe = Probe(mosquitto, ["optlease-test/nothing"])
    try:
        agents("h1")
        probe.publish(fast.status_topic("h9"), fast.AgentStatus("h9", "init", 2, 4 * 1024 * 1024).encode())
        assert e.wait_hosts(["h1", "h9"], 10)
        assert e.hosts()["h9"].capacity == {"vcpus": 2, "memory_mb": 4096}
        # noise on both topics: dropped and logged, the enactor goes on
        for topic in (fast.result_topic("h1"), fast.status_topic("h1")):
            for payload in (b"", b"\xff\xfe", b"result: [", b"- a list", b"---\nresult: vm started\nid: t-x\n"
                            b"list: [{vm-name: a, status: maybe}]\n---", b"---\nresult: vm stopped\nid: t-nobody\n---"):
                probe.publish(topic, payload)
        probe.publish("fast/migfra/h1/result/extra", b"---\nresult: vm started\n---")
        # h9 announced itself once and never answers: silent after the host timeout; h1 announces itself only when
        # it connects (no heartbeats here), but it answers the probes, as a migfra would: alive
        deadline = time.monotonic() + 5
        while e.hosts()["h9"].alive and time.monotonic() < deadline:
            time.sleep(0.05)
        assert {h: i.alive for h, i in e.hosts().items()} == {"h1": True, "h9": False}
        assert [o.ok for o in settle(e, [VmTask("start", 3, 1, "h1")])] == [True]
        assert e.hosts()["h1"].alive and not e.hosts()["h9"].alive
    finally:
        probe.close()


def test_a_broker_restart_mid_run(enactor, agents, mosquitto):  # noqa: F811
    e = enactor(task_timeout=3.0)
    hosts = agents("h1", "h2")
    assert e.wait_hosts(hosts, 10)
    assert all(o.ok for o in settle(e, [VmTask("start", 1, 1, "h1"), VmTask("start", 2, 1, "h2")]))
    mosquitto.stop()
    deadline = time.monotonic() + 5
    while e.connected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not e.connected
    # submitted while the broker is away: waits for the subscriptions, keeps its timer, goes out after
    e.submit([VmTask("suspend", 1, 1, "h1")])
    mosquitto.start()
    assert e.wait_idle(20)
    outcomes = e.outcomes()
    # the agents may come back after the enactor: a suspend that found nobody is retried until one did
    assert [o.ok for o in outcomes] == [True], outcomes
    assert settle(e, [VmTask("migrate", 2, 1, "h2", destination="h1", migration_type="warm")])[0].ok
    assert domains(hosts) == {A: ("h1", "paused"), B: ("h1", "running")}


def test_mqtt_section_of_the_configuration(mosquitto):  # noqa: F811
    text = (f"[general]\nmode: fast\n[scheduling]\nsuspension: all\nsuspend-rate: 32\nresume-rate: 32\n"
            f"[accounting]\n[mqtt]\nhost: {mosquitto.host}\nport: {mosquitto.port}\ntask-timeout: 0.5\n"
            f"task-retries: 0\nhost-timeout: 2.5\ninsecure: yes\n")
    cfg = parse_config(text)
    e = MqttEnactor.from_config(cfg, connect_timeout=10)
    try:
        assert e.connected and (e.task_timeout, e.task_retries, e.host_timeout) == (0.5, 0, 2.5)
        assert cfg.get("mqtt", "keepalive") == 30 and cfg.get("mqtt", "username") is None
    finally:
        e.close()


def test_mode_fast_refuses_a_broker_without_credentials_or_tls(tmp_path):
    """Whoever can publish on the broker commands the hosts: the daemon does not start on an open broker unless
    the operator says so, and says it in one line."""
    conf = tmp_path / "fast.conf"
    conf.write_text(daemon_config(port=free_port(), persistence_file="none", resources="1 CPU:100 Memory:1024",
                                  scheduling={"suspension": "none"}, mode="fast",
                                  mqtt={"port": free_port(), "hosts": "h1"}))
    done = subprocess.run([sys.executable, "-m", "optlease.cli.main", "serve", "-c", str(conf), "--fg"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.strip()]
    assert "[mqtt] has neither username/password nor tls-ca" in line and "insecure: yes" in line, line


def test_no_broker_at_all_never_raises():
    """Without a broker nobody could answer: the task waits for it (its timer stopped), nothing raises."""
    e = MqttEnactor("127.0.0.1", 1, task_timeout=0.2, task_retries=0, connect_timeout=0.3)
    try:
        e.submit([VmTask("stop", 1, 1, "h1")])
        assert not e.wait_idle(1.0) and e.outcomes() == [] and e.busy()
        assert not e.connected and e.hosts() == {}
    finally:
        e.close()


def test_heartbeats_keep_a_host_alive_and_its_silence_is_noticed(enactor, mosquitto, tmp_path, caplog):  # noqa: F811
    """An agent beating every 0.2 s stays alive past a 1 s host timeout; stopped, it is silent within the timeout;
    back, it is alive again (and asked what it runs)."""
    quiet_libvirt()
    caplog.set_level("WARNING", logger="optlease.enact.mqtt")
    e = enactor(host_timeout=1.0)
    node = tmp_path / "hb.xml"
    node.write_text(NODE_XML)
    conn = libvirt.open(f"test://{node}")

    def beating() -> Agent:
        agent = Agent("hb1", Hypervisor(conn), Broker(mosquitto.host, mosquitto.port), heartbeat=0.2)
        agent.start()
        return agent

    agent = beating()
    try:
        assert e.wait_hosts(["hb1"], 10)
        assert e.hosts()["hb1"].capacity == {"vcpus": 4, "memory_mb": 8192}
        time.sleep(2.0)
        assert e.hosts()["hb1"].alive, "a beating host was marked silent"
        agent.stop()
        gone = time.monotonic()
        while e.hosts()["hb1"].alive and time.monotonic() - gone < 10:
            time.sleep(0.05)
        noticed = time.monotonic()
        # measured from the last message the enactor heard (its clock is time.monotonic), not from the stop, which
        # a loaded machine may finish long after the last beat: never before the host timeout, and by the host
        # timeout's own check ("silent for"), not by the unanswered probe's task timeout (5 s after the probe); the
        # slack is the lateness of the enactor's 50 ms tick and of this loop's poll, which reached 1.2 s at load 22
        # on 2 cores
        last = e.hosts()["hb1"].last_seen
        assert not e.hosts()["hb1"].alive
        assert 1.0 <= noticed - last <= 1.0 + 3.0, (noticed - last, gone - last)
        assert any("host hb1: silent for" in r.getMessage() for r in caplog.records), caplog.text
        asked = time.monotonic()
        agent = beating()
        assert e.wait_hosts(["hb1"], 5)
        assert e.wait_inventory(["hb1"], 5, since=asked)
    finally:
        agent.stop()
        conn.close()


def test_heartbeat_messages_carry_the_capacity(mosquitto, tmp_path):  # noqa: F811
    quiet_libvirt()
    probe = Probe(mosquitto, [fast.status_topic("hb2")])
    conn = libvirt.open("test:///default")
    agent = Agent("hb2", Hypervisor(conn), Broker(mosquitto.host, mosquitto.port), heartbeat=0.1)
    try:
        agent.start()
        first = fast.parse_status(probe.expect(lambda m: True).payload)
        beat = fast.parse_status(probe.expect(lambda m: b"heartbeat" in m.payload).payload)
    finally:
        agent.stop()
        conn.close()
        probe.close()
    assert first.task == "init" and beat.task == "heartbeat"
    assert (beat.source, beat.vcpus, beat.memory_kib) == ("hb2", first.vcpus, first.memory_kib)
