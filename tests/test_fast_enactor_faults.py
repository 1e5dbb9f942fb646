"""The MQTT enactor when things go wrong, against a real mosquitto and hosts that behave as migfra does (no status
messages, `Wrong domain state` for a stop or a migration of a domain that is not running, no `list vms`): hostile
payloads on the result topic, a domain stopped behind our back, a late answer to an attempt already retried, a task
that keeps failing, a host killed with no host timeout, a broker away for longer than the task timeout."""
from __future__ import annotations

import threading
import time

import pytest

from conftest import wait_until
from fake_migfra import FakeMigfra
from mqtt_broker import Probe, mosquitto  # noqa: F401 - the fixture
from optlease.enact import fast
from optlease.enact.base import VmTask, vm_name
from optlease.enact.mqtt import MqttEnactor
from optlease.enact.mqtt_jobs import minimal_domain_xml

from test_fast_agent_guard import BOMB

A = vm_name(1, 1)


@pytest.fixture
def make(mosquitto):  # noqa: F811
    """make(hosts, **options) -> (enactor, {host: FakeMigfra}); the enactor expects the hosts from the start."""
    made: list = []

    def build(hosts=("h1",), **options):
        cluster: dict = {}
        fakes = {h: FakeMigfra(mosquitto, h, cluster) for h in hosts}
        options.setdefault("task_timeout", 1.0)
        e = MqttEnactor(mosquitto.host, mosquitto.port, connect_timeout=10, hosts=hosts,
                        domain_xml=minimal_domain_xml, **options)
        made.extend([e, *fakes.values()])
        return e, fakes

    yield build
    for thing in made:
        thing.close()


def settle(e: MqttEnactor, *tasks: VmTask, timeout: float = 15.0):
    e.submit(list(tasks))
    assert e.wait_idle(timeout), "tasks did not settle in time"
    return e.outcomes()


def alive(e: MqttEnactor, host: str) -> bool:
    return e.hosts()[host].alive


def test_migfra_hosts_are_known_alive_by_probes_and_say_they_cannot_list(make):
    """migfra never announces itself: a probe it answers with its id makes it alive; it has no `list vms`, which
    the enactor notes (and stops waiting for) instead of waiting in vain."""
    e, _ = make(("h1", "h2"))
    wait_until(lambda: alive(e, "h1") and alive(e, "h2"), 10, "probes answered")
    assert e.wait_inventory(["h1", "h2"], 10)
    assert e.no_inventory == {"h1", "h2"}


def test_hostile_payloads_on_a_result_topic_stop_nothing(make, mosquitto):  # noqa: F811
    """An alias bomb (519 bytes, 10^8 leaves), a result of 3 MB and one of 20,001 nodes: dropped, and meanwhile the
    host stays alive and a task settles."""
    e, _ = make(("h1",), host_timeout=1.0)
    wait_until(lambda: alive(e, "h1"), 10, "h1 alive")
    probe = Probe(mosquitto, ["optlease-test/nothing"])
    bomb = BOMB.replace("task: stop vm\nlist: [{vm-name: *h}]", "list: [{vm-name: a, status: *h}]")
    many = "---\nresult: vm started\nid: t-x\nlist:\n" + "  - {vm-name: a, status: success}\n" * 7000 + "---"
    try:
        for payload in (bomb, b"x" * (3 << 20), many):
            probe.publish(fast.result_topic("h1"), payload)
        (outcome,) = settle(e, VmTask("start", 1, 1, "h1", memory_mb=256))
        assert outcome.ok, outcome
        for _ in range(30):          # 1.5 s: longer than the host timeout
            assert alive(e, "h1")
            time.sleep(0.05)
    finally:
        probe.close()


def test_a_stop_of_a_domain_gone_behind_our_back_is_done(make, mosquitto):  # noqa: F811
    e, fakes = make(("h1",))
    assert settle(e, VmTask("start", 1, 1, "h1", memory_mb=256))[0].ok
    probe = Probe(mosquitto, ["optlease-test/nothing"])
    try:
        probe.publish(fast.task_topic("h1"), fast.encode_task(fast.StopVm((fast.StopEntry(A),))))   # forged
        wait_until(lambda: A not in fakes["h1"].domains, 5, "the forged stop")
    finally:
        probe.close()
    (outcome,) = settle(e, VmTask("stop", 1, 1, "h1"))
    assert outcome.ok and "already gone" in outcome.details, outcome
    assert e.running() == {}
    stops = [d for d in fakes["h1"].tasks if d["task"] == "stop vm"]
    assert len(stops) == 2          # the forged one and ours, once: no retry of a goal already reached


def test_a_late_success_is_not_undone_by_the_error_of_its_retry(make, mosquitto):  # noqa: F811
    """Attempt 1 is slow, attempt 2 (a fresh id) answers `error` first (the domain is already being started), then
    attempt 1 answers `success`: the task succeeded."""
    seen: list[dict] = []
    both = threading.Event()

    def hold(doc) -> bool:
        if doc["task"] != "start vm" or not doc.get("vm-configurations"):
            return True          # probes are answered
        seen.append(doc)
        if len(seen) == 2:
            both.set()
        return False

    # the enactor's clock moves only when told: attempt 2 goes out once attempt 1's timeout has passed, and no
    # deadline passes while a loaded machine delivers the answers
    now = [1000.0]
    e, fakes = make(("h1",), task_timeout=0.5, task_retries=1, clock=lambda: now[0])
    fakes["h1"].answer = hold
    e.submit([VmTask("start", 1, 1, "h1", memory_mb=256)])
    wait_until(lambda: len(seen) == 1, 10, "attempt 1")
    now[0] += 0.6
    assert both.wait(10), "no retry went out"
    first, retry = seen
    assert first["id"] != retry["id"]
    fakes["h1"]._send("vm started", retry["id"], [{"vm-name": A, "status": "error", "details": "Domain is busy."}])
    fakes["h1"]._send("vm started", first["id"], [{"vm-name": A, "status": "success"}])
    assert e.wait_idle(10)
    (outcome,) = e.outcomes()
    assert outcome.ok, outcome
    assert e.running() == {A: ("h1", "running")}


def test_a_task_that_keeps_failing_is_held_back_longer_each_time(make):
    """Resuming a domain that is not there fails each time; the same task asked again goes out only after 1 s,
    then 2 s (on the enactor's clock), never at the rate it is asked."""
    now = [1000.0]
    e, fakes = make(("h1",), task_timeout=1000.0, clock=lambda: now[0])
    wait_until(lambda: alive(e, "h1"), 10, "h1 alive")
    resumes = lambda: sum(d["task"] == "resume vm" for d in fakes["h1"].tasks)   # noqa: E731
    task = VmTask("resume", 1, 1, "h1")
    assert not settle(e, task)[0].ok and resumes() == 1
    for held in (1.0, 2.0):
        e.submit([task])
        time.sleep(0.3)
        assert resumes() == held and e.busy()          # held back: not sent
        now[0] += held - 0.5
        time.sleep(0.3)
        assert resumes() == held                      # not yet
        now[0] += 0.6
        assert e.wait_idle(10) and not e.outcomes()[0].ok
        assert resumes() == held + 1


def test_a_killed_host_is_noticed_without_host_timeout(make):
    """host-timeout 0 (None): no silence counts, but a task left unanswered makes the enactor probe the host, and
    a host that answers neither is not alive; its task settles after its attempts, and no more are sent."""
    e, fakes = make(("h1",), task_timeout=0.5, task_retries=1, host_timeout=None)
    wait_until(lambda: alive(e, "h1"), 10, "h1 alive")
    fakes["h1"].close()                                  # killed
    (outcome,) = settle(e, VmTask("stop", 1, 1, "h1"))
    assert outcome.timed_out and not outcome.ok
    wait_until(lambda: not alive(e, "h1"), 5, "h1 noticed dead")


def test_a_broker_away_for_longer_than_the_timeouts_times_nothing_out(make, mosquitto):  # noqa: F811
    """The enactor's clock moves only when told: 1.5 s pass while the broker is away (five task timeouts, and longer
    than the host timeout), none once it is back, so the host's reconnection may take what a loaded machine takes."""
    now = [1000.0]
    e, fakes = make(("h1",), task_timeout=0.3, task_retries=0, host_timeout=1.0, clock=lambda: now[0])
    wait_until(lambda: alive(e, "h1"), 10, "h1 alive")
    mosquitto.stop()
    wait_until(lambda: not e.connected, 5, "the enactor sees the broker gone")
    e.submit([VmTask("start", 1, 1, "h1", memory_mb=256)])
    now[0] += 1.5
    wait_until(lambda: e._last_tick == now[0], 5, "a tick while the broker is away")
    # the host is back on the broker before the enactor: what the enactor sends on its return (the task, a probe)
    # would be lost on a host not yet subscribed, and with the clock held nothing would be sent again
    e.client.loop_stop()
    mosquitto.start()
    wait_until(fakes["h1"].subscribed.is_set, 20, "h1 back on the broker")
    e.client.loop_start()
    assert e.wait_idle(20)
    (outcome,) = e.outcomes()
    assert outcome.ok, outcome
    assert alive(e, "h1") and fakes["h1"].domains == {A: "running"}


def test_paused_domains_are_resumed_before_migfra_stops_or_migrates_them(make):
    """migfra's libvirt code stops and migrates only RUNNING domains; start waits for SSH unless told not to."""
    e, fakes = make(("h1", "h2"), task_timeout=2.0)
    h1, h2 = fakes["h1"], fakes["h2"]                 # they wait 5 s for SSH unless probe-with-ssh is false
    assert settle(e, VmTask("start", 1, 1, "h1", memory_mb=256))[0].ok
    assert settle(e, VmTask("suspend", 1, 1, "h1"))[0].ok
    (moved,) = settle(e, VmTask("migrate", 1, 1, "h1", destination="h2", migration_type="warm"))
    assert moved.ok, moved
    assert h1.domains == {} and h2.domains == {A: "paused"}
    assert e.running() == {A: ("h2", "paused")}
    (stopped,) = settle(e, VmTask("stop", 1, 1, "h2"))
    assert stopped.ok and h2.domains == {}
    kinds = lambda fake: [d["task"] for d in fake.tasks                                      # noqa: E731
                          if d["task"] != "list vms" and (d["task"] != "start vm" or d.get("vm-configurations"))]
    assert kinds(h1) == ["start vm", "suspend vm", "resume vm", "migrate vm"]
    assert kinds(h2) == ["suspend vm", "resume vm", "stop vm"]
    start = next(d for d in h1.tasks if d.get("vm-configurations"))
    assert start["vm-configurations"][0]["probe-with-ssh"] == "false"


@pytest.mark.parametrize("kind", ["stop", "migrate"])
def test_a_domain_paused_without_our_knowing_is_resumed_first(make, kind):
    """After a restart the enactor cannot ask a migfra what it runs: a stop or migration that migfra refuses with
    `Wrong domain state` goes out again, resume first."""
    e, fakes = make(("h1", "h2"))
    fakes["h1"].domains[A] = "paused"
    task = VmTask("stop", 1, 1, "h1") if kind == "stop" else VmTask("migrate", 1, 1, "h1", destination="h2")
    (outcome,) = settle(e, task)
    assert outcome.ok, outcome
    assert fakes["h1"].domains == {} and fakes["h2"].domains == ({} if kind == "stop" else {A: "paused"})
