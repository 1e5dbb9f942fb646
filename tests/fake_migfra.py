"""A stand-in for the real FAST migration framework (migfra), which cannot run here: it speaks migfra's exact message
shapes and keeps the rules of its libvirt hypervisor, with domains held in memory.

Like migfra: it subscribes to fast/migfra/<host>/task (QoS 2) and answers on .../result (QoS 1), each task in its own
thread; it never publishes a status (no init, no heartbeat); results are framed `---\\n...\\n---` with the id echoed
unquoted, and no id line when none was sent; what it cannot read (bad YAML, an unknown task such as optlease's
`list vms`) is answered `result: unknown` without id; an empty `vm-configurations` is answered `Empty task container
executed.` with the id. Like its libvirt code: `stop vm` and `migrate vm` need a RUNNING domain (`Wrong domain
state` otherwise, a paused one included); `start vm` waits `ssh_wait` seconds for SSH unless the entry says
`probe-with-ssh: false`; `stop vm` takes `regex` (whole names, running domains).
"""
from __future__ import annotations

import json
import re
import threading
import time
import uuid

import paho.mqtt.client as mqtt
import yaml

RESULT_KIND = {"start vm": "vm started", "stop vm": "vm stopped", "suspend vm": "vm suspended",
               "resume vm": "vm resumed", "migrate vm": "vm migrated"}


class FakeMigfra:
    """One host's migfra. `cluster` is shared by the hosts of one test, so a migration can move a domain."""

    def __init__(self, broker, host: str, cluster: dict | None = None, *, ssh_wait: float = 5.0,
                 answer=None) -> None:
        """`answer(task_doc) -> bool`: False drops the task unanswered (a host that hangs); default answers all."""
        self.host, self.ssh_wait, self.answer = host, ssh_wait, answer
        self.cluster = cluster if cluster is not None else {}
        self.cluster[host] = self
        self.domains: dict[str, str] = {}       # name -> running | paused
        self.tasks: list[dict] = []             # every task document received, in order
        self.lock = threading.Lock()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"migfra-{host}-{uuid.uuid4().hex[:6]}")
        self.client.reconnect_delay_set(1, 2)
        self.subscribed = subscribed = threading.Event()     # cleared while it is away from the broker
        self.client.on_connect = lambda c, *_: c.subscribe(f"fast/migfra/{host}/task", 2)
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.on_disconnect = lambda *_: subscribed.clear()
        self.client.on_message = lambda _c, _u, msg: threading.Thread(target=self._task, args=(msg.payload,),
                                                                      daemon=True).start()
        self.client.connect(broker.host, broker.port, keepalive=10)
        self.client.loop_start()
        if not subscribed.wait(10):
            raise TimeoutError(f"fake migfra {host} did not subscribe")

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    # ------------------------------------------------------------------------------------------ the wire
    def _send(self, kind: str, task_id, entries: list[dict] | None = None, flat: dict | None = None) -> None:
        lines = ["---", f"result: {kind}"]
        if task_id is not None:
            lines.append(f"id: {task_id}")          # unquoted, as yaml-cpp writes it
        if flat is not None:
            lines += [f"{k}: {_scalar(v)}" for k, v in flat.items()]
        for i, entry in enumerate(entries or []):
            if i == 0:
                lines.append("list:")
            first = True
            for k, v in entry.items():
                lines.append(f"  {'- ' if first else '  '}{k}: {_scalar(v)}")
                first = False
        lines.append("---")
        self.client.publish(f"fast/migfra/{self.host}/result", "\n".join(lines), qos=1)

    def _unknown(self, details: str, task_id=None) -> None:
        self._send("unknown", task_id, [{"vm-name": "unknown", "status": "error", "details": details}])

    def _task(self, payload: bytes) -> None:
        try:
            docs = [d for d in yaml.load_all(payload.decode(), Loader=yaml.BaseLoader) if d]
            doc = docs[0]
            kind = doc["task"]
        except Exception:      # noqa: BLE001 - migfra answers whatever it cannot read the same way
            self._unknown("Exception: Cannot find key \"task\" to load Task from YAML.")
            return
        task_id = doc.get("id")        # BaseLoader: the text as written, echoed as such
        with self.lock:
            self.tasks.append(doc)
        if self.answer is not None and not self.answer(doc):
            return
        if kind not in RESULT_KIND and kind != "quit":
            self._unknown("Exception: Unknown type of Task while loading.")
            return
        if kind == "start vm":
            configs = doc.get("vm-configurations") or []
            if not configs:
                self._unknown("Empty task container executed.", task_id)
                return
            self._send("vm started", task_id, [self._start(c) for c in configs])
        elif kind == "stop vm":
            entries = []
            for e in doc.get("list") or []:
                if "regex" in e:
                    with self.lock:
                        names = [n for n, s in self.domains.items() if s == "running" and re.fullmatch(e["regex"], n)]
                    entries += [self._stop(n) for n in names]
                else:
                    entries.append(self._stop(e.get("vm-name", "")))
            self._send("vm stopped", task_id, entries)
        elif kind in ("suspend vm", "resume vm"):
            entries = [self._pause(e.get("vm-name", ""), kind == "suspend vm") for e in doc.get("list") or []]
            self._send(RESULT_KIND[kind], task_id, entries)
        elif kind == "migrate vm":
            self._send("vm migrated", task_id, flat=self._migrate(doc.get("vm-name", ""), doc.get("destination")))

    # --------------------------------------------------------------------------------- the hypervisor's rules
    def _start(self, config: dict) -> dict:
        name = config.get("vm-name") or config.get("name") or _xml_name(config.get("xml", ""))
        with self.lock:
            if name in self.domains:
                return {"vm-name": name, "status": "error", "details": "Domain already running."}
            self.domains[name] = "running"
        if config.get("probe-with-ssh", "true") != "false":
            time.sleep(self.ssh_wait)         # waits for SSH into the domain before it answers
        return {"vm-name": name, "status": "success"}

    def _stop(self, name: str) -> dict:
        with self.lock:
            state = self.domains.get(name)
            if state is None:
                return {"vm-name": name, "status": "error", "details": "Domain not found."}
            if state != "running":
                return {"vm-name": name, "status": "error", "details": "Wrong domain state."}
            del self.domains[name]
        return {"vm-name": name, "status": "success"}

    def _pause(self, name: str, suspend: bool) -> dict:
        with self.lock:
            state = self.domains.get(name)
            if state is None:
                return {"vm-name": name, "status": "error", "details": "Domain not found."}
            if state != ("running" if suspend else "paused"):
                return {"vm-name": name, "status": "error", "details": "Wrong domain state."}
            self.domains[name] = "paused" if suspend else "running"
        return {"vm-name": name, "status": "success"}

    def _migrate(self, name: str, destination) -> dict:
        other = self.cluster.get(destination)
        with self.lock:
            state = self.domains.get(name)
            if state != "running" or other is None:
                why = "Domain not found." if state is None else "Wrong domain state." if other else "No route."
                return {"vm-name": name, "status": "error", "details": why}
            del self.domains[name]
        with other.lock:
            other.domains[name] = "running"
        return {"vm-name": name, "status": "success"}


def _scalar(value: str) -> str:
    """A value as yaml-cpp writes it: plain when it can be, double-quoted when it holds `: ` or the like."""
    return value if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ._-]*", value) else json.dumps(value)


def _xml_name(xml: str) -> str:
    match = re.search(r"<name>\s*([^<]+?)\s*</name>", xml)
    return match.group(1) if match else ""
