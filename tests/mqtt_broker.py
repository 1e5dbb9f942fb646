"""A real mosquitto on a free loopback port for the tests, and a probe client that publishes and collects messages."""
from __future__ import annotations

import os
import queue
import random
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import paho.mqtt.client as mqtt
import pytest

MOSQUITTO = shutil.which("mosquitto") or next(
    (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if os.access(p, os.X_OK)), None)


# each pytest-xdist worker (gw0, gw1, ...) draws from its own slice of 20000-31999, so two workers never hand out the
# same port; a process never hands out one port twice, so a test that asks for two gets two
_PORTS_LOW, _PORTS_HIGH = 20000, 32000
_handed_out: set[int] = set()
_rng = random.Random()


def worker_ports() -> range:
    """This test process's slice of the loopback ports the tests use (all of them without pytest-xdist)."""
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")) % count
    size = (_PORTS_HIGH - _PORTS_LOW) // count
    return range(_PORTS_LOW + index * size, _PORTS_LOW + (index + 1) * size)


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range (32768 and up on Linux): a port the kernel hands
    out could be taken by any outgoing connection (a client of the broker, say) before the server binds it."""
    ports = worker_ports()
    if len(_handed_out) > len(ports) // 2:
        _handed_out.clear()
    for _ in range(200):
        port = _rng.choice(ports)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {ports.start}..{ports.stop - 1}")


class Mosquitto:
    """One broker process; stop() and start() again keep its port, to play a broker that goes away."""

    def __init__(self, workdir: Path, allow_anonymous: bool = True) -> None:
        self.host, self.port = "127.0.0.1", free_port()
        self.conf = workdir / f"mosquitto-{self.port}.conf"
        self.log = workdir / f"mosquitto-{self.port}.log"
        # without anonymous access and without a password file, mosquitto refuses every client: a locked broker
        self.conf.write_text(f"listener {self.port} {self.host}\nallow_anonymous {str(allow_anonymous).lower()}\n"
                             f"persistence false\nlog_dest stderr\n")
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([MOSQUITTO, "-c", str(self.conf)], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self.proc.returncode}: {self.log.read_text()[-500:]}")
            try:
                socket.create_connection((self.host, self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"mosquitto did not listen on {self.address} within {timeout} s")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    """A running mosquitto, stopped after the test."""
    if MOSQUITTO is None:
        pytest.skip("the mosquitto broker binary is not installed (apt-get install mosquitto)")
    broker = Mosquitto(tmp_path)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


class Probe:
    """A test client: subscribes to topics (again after every reconnect) and queues what arrives."""

    def __init__(self, broker: Mosquitto, topics: list[str], timeout: float = 10.0) -> None:
        self.topics = topics
        self.inbox: "queue.Queue[mqtt.MQTTMessage]" = queue.Queue()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"probe-{uuid.uuid4().hex[:8]}")
        self.client.reconnect_delay_set(1, 2)
        self.subscribed = 0
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *_args: setattr(self, "subscribed", self.subscribed + 1)
        self.client.on_message = lambda _c, _u, msg: self.inbox.put(msg)
        self.client.connect(broker.host, broker.port, keepalive=10)
        self.client.loop_start()
        self.wait_subscribed(1, timeout)

    def wait_subscribed(self, times: int, timeout: float = 10.0) -> None:
        """Wait until the broker has granted our subscriptions `times` times (once per connection)."""
        deadline = time.monotonic() + timeout
        while self.subscribed < times:
            if time.monotonic() > deadline:
                raise TimeoutError("probe did not get its subscriptions")
            time.sleep(0.01)

    def _on_connect(self, client, _userdata, _flags, reason_code, _properties) -> None:
        if not reason_code.is_failure:
            client.subscribe([(t, 2) for t in self.topics])

    def publish(self, topic: str, payload: bytes | str, qos: int = 2) -> None:
        self.client.publish(topic, payload, qos=qos).wait_for_publish(5)

    def expect(self, match: Callable[[mqtt.MQTTMessage], bool], timeout: float = 10.0) -> mqtt.MQTTMessage:
        """The first message (from now on) that matches; others are dropped."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no matching message arrived in time")
            try:
                msg = self.inbox.get(timeout=left)
            except queue.Empty:
                continue
            if match(msg):
                return msg

    def quiet(self, seconds: float) -> list[mqtt.MQTTMessage]:
        """Everything that arrives within `seconds`."""
        time.sleep(seconds)
        out = []
        while not self.inbox.empty():
            out.append(self.inbox.get_nowait())
        return out

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
