"""The FAST migfra message model: round trips, framing, ids that stay strings, and a corpus of malformed payloads."""
from __future__ import annotations

import pytest
import yaml
from hypothesis import given, strategies as st

from optlease.enact import fast
from optlease.errors import InputError

XML = "<domain type='test'>\n  <name>vm1</name>\n  <memory unit='KiB'>131072</memory>\n</domain>\n"

TASKS = [
    pytest.param(fast.StartVm((fast.VmConfig(xml=XML, memory_kib=262144, vcpus=2),
                               fast.VmConfig(vm_name="vm2", transient=False, time_measurement=True))), id="start"),
    pytest.param(fast.StopVm((fast.StopEntry("vm1"), fast.StopEntry("vm2", force=True, undefine=True))), id="stop"),
    pytest.param(fast.SuspendVm(("vm1", "vm2")), id="suspend"),
    pytest.param(fast.ResumeVm(("vm1",)), id="resume"),
    pytest.param(fast.MigrateVm("vm1", "node2", "live", rdma=True, pscom_hook_procs=2, vcpu_map=((0,), (1, 2)),
                                swap_with=fast.SwapWith("vm9", 1, ((3,),)), time_measurement=True), id="migrate"),
    pytest.param(fast.MigrateVm("vm1", "node2"), id="migrate-default-warm"),
    pytest.param(fast.RepinVm("vm1", ((4,), (5, 6))), id="repin"),
    pytest.param(fast.Quit(), id="quit"),
]


@pytest.mark.parametrize("task", TASKS)
def test_task_round_trip(task):
    assert fast.parse_task(fast.encode_task(task, host="node1")) == task


@pytest.mark.parametrize("task", TASKS)
def test_task_is_framed_like_migfra(task):
    text = fast.encode_task(task).decode()
    assert text.startswith("---\n") and text.endswith("\n---") and text.count("\n---") == 1
    doc = [d for d in yaml.safe_load_all(text) if d is not None]
    assert len(doc) == 1 and doc[0]["task"] == task.kind and doc[0]["id"] == task.id


@pytest.mark.parametrize("kind, body_keys", [
    ("start vm", {"vm-configurations"}), ("stop vm", {"list"}), ("suspend vm", {"list"}), ("resume vm", {"list"}),
    ("migrate vm", {"vm-name", "destination", "parameter"}), ("repin vm", {"vm-name", "vcpu-map"}), ("quit", set()),
], ids=lambda v: v if isinstance(v, str) else None)
def test_task_shapes_follow_fast_lib(kind, body_keys):
    task = next(p.values[0] for p in TASKS if p.values[0].kind == kind)
    doc = fast.task_doc(task)
    assert set(doc) - {"task", "id", "time-measurement"} == body_keys


def test_start_memory_is_kib_and_stop_entries_carry_force_and_undefine():
    doc = fast.task_doc(fast.StartVm((fast.VmConfig(vm_name="a", memory_kib=1048576, vcpus=4),)))
    assert doc["vm-configurations"] == [{"vm-name": "a", "memory": 1048576, "vcpus": 4}]
    doc = fast.task_doc(fast.StopVm((fast.StopEntry("a", force=True),)))
    assert doc["list"] == [{"vm-name": "a", "force": True, "undefine": False}]
    doc = fast.task_doc(fast.MigrateVm("a", "n2", "offline"))
    assert doc["parameter"] == {"migration-type": "offline", "rdma-migration": False}


def test_fresh_ids_are_unique_strings_that_no_yaml_loader_turns_into_numbers():
    ids = {fast.new_task_id() for _ in range(1000)}
    assert len(ids) == 1000
    for task_id in list(ids)[:50]:
        assert yaml.safe_load(f"id: {task_id}")["id"] == task_id      # unquoted, as migfra echoes it


@pytest.mark.parametrize("echoed, expected", [
    ("id: t-0123", "t-0123"), ("id: 42", "42"), ("id: yes", "yes"), ("id: '007'", "007"), ("id: 1.5", "1.5"),
    ("id: 042", "042"), ("id: 0x1F", "0x1F"),
], ids=["ours", "int", "yaml11-bool", "quoted", "float", "octal", "hex"])
def test_result_ids_come_back_as_strings(echoed, expected):
    result = fast.parse_result(f"---\nresult: vm suspended\n{echoed}\nlist:\n- vm-name: a\n  status: success\n---")
    assert result.id == expected and isinstance(result.id, str)


RESULTS = [
    pytest.param(fast.Result("vm started", (fast.VmResult("a", "success", None, {"overall": 0.25}),
                                            fast.VmResult("b", "error", "Domain not found")), "t-1"), id="started"),
    pytest.param(fast.Result("vm stopped", (fast.VmResult("a", "success"),), "t-2"), id="stopped"),
    pytest.param(fast.Result("vm repinned", (fast.VmResult("a", "success"),), "t-3"), id="repinned"),
    pytest.param(fast.Result("vm migrated", (fast.VmResult("a", "error", "no agent"),), "t-4"), id="migrated"),
    pytest.param(fast.unknown_result("bad YAML"), id="unknown"),
    pytest.param(fast.quit_result("t-5"), id="quit"),
]


@pytest.mark.parametrize("result", RESULTS)
def test_result_round_trip(result):
    assert fast.parse_result(result.encode()) == result


def test_only_vm_migrated_is_flat_and_unknown_has_no_id():
    migrated = fast.Result("vm migrated", (fast.VmResult("a", "success"),), "t-9").to_doc()
    assert migrated == {"result": "vm migrated", "id": "t-9", "vm-name": "a", "status": "success"}
    stopped = fast.Result("vm stopped", (fast.VmResult("a", "success"),), "t-9").to_doc()
    assert stopped == {"result": "vm stopped", "id": "t-9", "list": [{"vm-name": "a", "status": "success"}]}
    unknown = fast.unknown_result("no task").to_doc()
    assert "id" not in unknown and unknown["list"][0]["details"] == "no task"


def test_real_migfra_result_text_parses():
    text = ("---\nresult: vm started\nid: t-abc\nlist:\n  - vm-name: vm1\n    status: success\n"
            "    time-measurement:\n      overall: 1.5\n  - vm-name: vm2\n    status: error\n"
            "    details: Domain not found\n---")
    result = fast.parse_result(text.encode())
    assert not result.ok and result.details == "Domain not found"
    assert result.vms[0].time_measurement == {"overall": 1.5}


def test_agent_status_round_trip():
    status = fast.AgentStatus("node1", "init", 16, 3145728)
    assert fast.parse_status(status.encode()) == status


@pytest.mark.parametrize("build, topic", [
    (fast.task_topic, "fast/migfra/node1/task"), (fast.result_topic, "fast/migfra/node1/result"),
    (fast.status_topic, "fast/agent/node1/status"),
], ids=["task", "result", "status"])
def test_topics(build, topic):
    assert build("node1") == topic and fast.host_of_topic(topic) == "node1"


@pytest.mark.parametrize("host", ["", "a/b", "a+", "#", None], ids=["empty", "slash", "plus", "hash", "none"])
def test_hosts_that_cannot_be_a_topic_level_are_refused(host):
    with pytest.raises(fast.FastProtocolError, match="bad host name"):
        fast.check_host(host)


# Payloads migfra answers `result: unknown`; each must raise a FastProtocolError whose message names the problem.
MALFORMED = [
    pytest.param(b"", "empty payload", id="empty"),
    pytest.param(b"   \n", "empty payload", id="blank"),
    pytest.param(b"---\n---", "no YAML document", id="only-frames"),
    pytest.param(b"task: [start vm", "bad YAML", id="bad-yaml"),
    pytest.param(b"\xff\xfe\x00garbage", "not UTF-8", id="binary"),
    pytest.param(b"- task: quit", "mapping", id="top-level-list"),
    pytest.param(b"just a string", "mapping", id="top-level-scalar"),
    pytest.param(b"task: quit\n---\ntask: quit", "one YAML document", id="two-documents"),
    pytest.param(b"vm-name: vm1\nid: t-1", 'key "task"', id="no-task-key"),
    pytest.param(b"task: reboot vm\nid: t-1", "Unknown type", id="unknown-task"),
    pytest.param(b"task: [1, 2]", "Unknown type", id="task-not-a-string"),
    pytest.param(b"task: start vm\nid: t-1", "missing vm-configurations", id="start-no-configs"),
    pytest.param(b"task: start vm\nvm-configurations: {vm-name: a}", "expected a list", id="configs-not-list"),
    pytest.param(b"task: start vm\nvm-configurations:\n- memory: 1024", "vm-name or xml", id="start-no-name"),
    pytest.param(b"task: start vm\nvm-configurations:\n- {vm-name: a, memory: lots}", "memory", id="memory-lots"),
    pytest.param(b"task: start vm\nvm-configurations:\n- {vm-name: a, memory: -5}", "out of range",
                 id="memory-negative"),
    pytest.param(b"task: start vm\nvm-configurations:\n- {vm-name: a, memory: 99999999999999999999999}",
                 "out of range", id="memory-huge"),
    pytest.param(b"task: start vm\nvm-configurations:\n- {vm-name: a, vcpus: 4294967296}", "out of range",
                 id="vcpus-huge"),
    pytest.param(b"task: start vm\nvm-configurations:\n- {vm-name: a, vcpus: true}", "vcpus", id="vcpus-bool"),
    pytest.param(b"task: start vm\nvm-configurations:\n- {vm-name: yes}", "vm-name", id="name-is-bool"),
    pytest.param(b"task: start vm\nvm-configurations:\n- {xml: [1]}", "xml", id="xml-not-string"),
    pytest.param(b"task: stop vm\nlist:\n- {vm-name: a, force: maybe}", "force", id="force-not-bool"),
    pytest.param(b"task: stop vm\nlist: [a, b]", "mapping", id="stop-entries-not-mappings"),
    pytest.param(b"task: suspend vm\nlist:\n- {}", "missing vm-name", id="suspend-no-name"),
    pytest.param(b"task: migrate vm\nvm-name: a", "missing destination", id="migrate-no-destination"),
    pytest.param(b"task: migrate vm\ndestination: n2", "missing vm-name", id="migrate-no-name"),
    pytest.param(b"task: migrate vm\nvm-name: a\ndestination: n/2", "bad host name", id="migrate-bad-destination"),
    pytest.param(b"task: migrate vm\nvm-name: a\ndestination: n2\nparameter: {migration-type: teleport}",
                 "migration-type", id="migration-type-unknown"),
    pytest.param(b"task: migrate vm\nvm-name: a\ndestination: n2\nparameter: fast", "parameter",
                 id="parameter-not-mapping"),
    pytest.param(b"task: repin vm\nvm-name: a", "missing vcpu-map", id="repin-no-map"),
    pytest.param(b"task: repin vm\nvm-name: a\nvcpu-map: [4, 5]", "vcpu-map", id="repin-flat-map"),
    pytest.param(b"task: repin vm\nvm-name: a\nvcpu-map: [[-1]]", "vcpu-map", id="repin-negative-cpu"),
    pytest.param(b"[" * 5000, "YAML", id="nested-too-deep"),
    pytest.param(b"task: quit\nid: [1]", "id", id="id-not-scalar"),
]


@pytest.mark.parametrize("payload, problem", MALFORMED)
def test_malformed_tasks_raise_a_typed_error_naming_the_problem(payload, problem):
    with pytest.raises(fast.FastProtocolError) as caught:
        fast.parse_task(payload)
    assert isinstance(caught.value, InputError)
    assert problem in str(caught.value)
    assert caught.value.task_id is None


@pytest.mark.parametrize("payload", [
    b"task: start vm\nid: t-7\nvm-configurations: []", b"task: stop vm\nid: t-7\nlist: []",
    b"task: resume vm\nid: t-7\nlist: []",
], ids=["start", "stop", "resume"])
def test_empty_task_container_keeps_its_id(payload):
    with pytest.raises(fast.FastProtocolError, match="Empty task container executed.") as caught:
        fast.parse_task(payload)
    assert caught.value.task_id == "t-7"


def test_oversized_payload_is_refused_before_parsing():
    with pytest.raises(fast.FastProtocolError, match="too large"):
        fast.decode(b"a: " + b"x" * 100, max_bytes=50)


@pytest.mark.parametrize("payload, problem", [
    (b"task: quit\na: &x [1]\nb: *x", "anchors and aliases"),
    (b"task: quit\nid: *x", "anchors and aliases"),
    (b"task: !!python/object/apply:os.system [true]", "tag"),
    (b"task: quit\nid: !!str 7", "tag"),
    (b"task: quit\nid: !custom 7", "tag"),
    (b"task: quit\nimage: !!binary aGVsbG8=", "tag"),
    (b"task: suspend vm\nlist:\n" + b"- {vm-name: a}\n" * 10_001, "too many YAML nodes"),
], ids=["alias", "unknown-alias", "python-tag", "str-tag", "local-tag", "binary-in-a-task", "nodes"])
def test_what_fast_never_writes_is_refused_before_anything_is_built(payload, problem):
    with pytest.raises(fast.FastProtocolError, match=problem):
        fast.parse_task(payload)


def test_binary_is_read_only_where_asked():
    assert fast.decode(b"image: !!binary aGVsbG8=", binary=True) == {"image": b"hello"}


def test_migfra_task_forms_the_agent_reads():
    """`name:` for `vm-name` in a start entry, `regex` instead of `vm-name` in a stop entry, `probe-with-ssh`."""
    start = fast.parse_task(b"task: start vm\nvm-configurations:\n- {name: a, probe-with-ssh: false}\nid: x")
    assert start.configs[0].name == "a" and start.configs[0].probe_with_ssh is False
    stop = fast.StopVm((fast.StopEntry(None, force=True, regex="lease-1-vm-[0-9]+"),), id="t-1")
    assert fast.parse_task(fast.encode_task(stop)) == stop
    for bad in (b"'('", b"'(a+)+$'", b"'(x|xx)*'", b"'(a){2,}'"):
        with pytest.raises(fast.FastProtocolError, match="regex"):
            fast.parse_task(b"task: stop vm\nlist:\n- {regex: " + bad + b"}")
    assert fast.parse_task(b"task: stop vm\nlist:\n- {regex: 'lease-(1|2)-vm-[0-9]+'}").entries[0].regex
    evacuate = fast.EvacuateNode(("n2", "n3"), "scatter", "live", id="t-2")
    assert fast.parse_task(fast.encode_task(evacuate)) == evacuate
    with pytest.raises(fast.FastProtocolError, match="destinations"):
        fast.parse_task(b"task: evacuate node\ndestinations: []")


def test_names_written_as_numbers_are_names():
    task = fast.parse_task(b"task: suspend vm\nlist:\n- vm-name: 1234")
    assert task.vm_names == ("1234",)


@given(st.text(max_size=200))
def test_no_text_crashes_the_task_parser(text):
    try:
        fast.parse_task(text)
    except fast.FastProtocolError:
        pass


@given(st.binary(max_size=200))
def test_no_bytes_crash_the_result_parser(data):
    try:
        fast.parse_result(data)
    except fast.FastProtocolError:
        pass


names = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30)


@given(names, names, st.sampled_from(fast.MIGRATION_TYPES))
def test_any_names_survive_a_round_trip(vm_name, destination, kind):
    destination = destination.replace("/", "_").replace("+", "_").replace("#", "_")
    task = fast.MigrateVm(vm_name, destination, kind)
    assert fast.parse_task(fast.encode_task(task)) == task
