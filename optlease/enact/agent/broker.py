"""Reaching the MQTT broker: the address and credentials, a paho client configured for them, the first connect."""
from __future__ import annotations

import ssl
import threading
import uuid
from dataclasses import dataclass

import paho.mqtt.client as mqtt

from optlease.errors import InputError


class BrokerError(RuntimeError):
    """The broker cannot be reached or refuses us, said in one line."""


@dataclass(frozen=True)
class Broker:
    host: str
    port: int = 1883
    username: str | None = None
    password: str | None = None
    tls_ca: str | None = None
    keepalive: int = 30

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `HOST` (port 1883) or `[V6ADDR]:PORT`."""
    text = text.strip()
    host, port = text, "1883"
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (text[end + 1:] and not text[end + 1:].startswith(":")):
            raise InputError(f"bad broker address {text!r}: expected HOST:PORT")
        host, port = text[1:end], text[end + 2:] or "1883"
    elif text.count(":") == 1:
        host, port = text.split(":")
    elif ":" in text:
        raise InputError(f"bad broker address {text!r}: write an IPv6 address as [ADDR]:PORT")
    if not host:
        raise InputError(f"bad broker address {text!r}: no host")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"bad broker address {text!r}: port must be 1..65535")
    return host, int(port)


def make_client(broker: Broker, name: str) -> mqtt.Client:
    """A paho client (callback API 2, MQTT 3.1.1, clean session) with credentials and TLS set. The id carries a
    random suffix: two clients with one id would knock each other off the broker forever."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"{name}-{uuid.uuid4().hex[:8]}",
                         clean_session=True, protocol=mqtt.MQTTv311)
    if broker.username is not None:
        client.username_pw_set(broker.username, broker.password)
    if broker.tls_ca is not None:
        client.tls_set(ca_certs=broker.tls_ca, cert_reqs=ssl.CERT_REQUIRED)
    # after a lost broker, paho's loop reconnects with this backoff; subscriptions are renewed in on_connect
    client.reconnect_delay_set(min_delay=1, max_delay=8)
    return client


def connect(client: mqtt.Client, broker: Broker, connected: threading.Event, refused: list[str],
            timeout: float = 10.0) -> None:
    """Connect, start paho's network thread and wait for the broker's answer. `connected` and `refused` are set by
    the caller's on_connect (set the event; append the reason when the broker refuses)."""
    try:
        client.connect(broker.host, broker.port, keepalive=broker.keepalive)
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise BrokerError(f"cannot reach MQTT broker {broker}: {reason}") from None
    client.loop_start()
    if not connected.wait(timeout):
        client.loop_stop()
        raise BrokerError(f"MQTT broker {broker} did not answer within {timeout:g} s")
    if refused:
        client.loop_stop()
        client.disconnect()
        raise BrokerError(f"MQTT broker {broker} refused the connection: {refused[0]}")
