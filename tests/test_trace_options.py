"""The [tracefile], [simulation] and policy options of a run, each seen to change what happens."""
from __future__ import annotations

import io
import re
from datetime import datetime
from pathlib import Path

import pytest

from optlease.accounting.metrics import run_summary
from optlease.engine.run import read_imagefile, simulate
from optlease.errors import InputError
from optlease.formats.config import load_config, render_config

from conftest import INSTANCES, REPO

QS = INSTANCES / "quickstart"


def quickstart(tmp_path, extra: dict[str, dict[str, str]] | None = None, body: str = ""):
    conf = tmp_path / "qs.conf"
    conf.write_text((QS / "quickstart.conf").read_text().replace("tracefile: quickstart.lwf",
                                                                  f"tracefile: {QS / 'quickstart.lwf'}") + body)
    cfg = load_config(conf, overrides=extra)
    out = io.StringIO()
    result = simulate(cfg, out=out)
    return result, out.getvalue()


def simulate_log(conf):
    out = io.StringIO()
    return simulate(load_config(conf), out=out), out.getvalue()


def vm_spans(lease):
    return [(h.start, h.end) for h in lease.held if h.kind == "vm" and h.outcome is None]


def test_bootshutdown_and_slowdown_overheads_lengthen_best_effort_leases(tmp_path):
    result, _ = quickstart(tmp_path, {"tracefile": {"add-overhead": "besteffort",
                                                    "runtime-slowdown-overhead": "10",
                                                    "bootshutdown-overhead": "00:01:00"}})
    be, ar = result.leases
    assert be.req.duration == 3960 + 60 and sum(e - s for s, e in vm_spans(be)) == 4020
    assert ar.req.duration == 1800  # ARs untouched with add-overhead: besteffort


def test_override_memory_changes_suspend_and_resume_times(tmp_path):
    result, _ = quickstart(tmp_path, {"tracefile": {"override-memory": "512"}})
    be = result.leases[0]
    suspend = next(h for h in be.held if h.kind == "suspend")
    assert suspend.end - suspend.start == 16  # 512 MB at 32 MB/s


def test_imagefile_assigns_images_in_request_order(tmp_path):
    (tmp_path / "images").write_text("small.img 600\nbig.img 4096\n#\nbig.img\nsmall.img\n")
    result, _ = quickstart(tmp_path, {"tracefile": {"imagefile": str(tmp_path / "images")}})
    assert [lease.req.software.id for lease in result.leases] == ["big.img", "small.img"]
    assert result.leases[0].req.software.size == 4096


def test_imagefile_with_an_unknown_image_is_named(tmp_path):
    (tmp_path / "images").write_text("small.img 600\n#\nhuge.img\n")
    with pytest.raises(InputError, match=r"images:3: image 'huge.img' has no size"):
        quickstart(tmp_path, {"tracefile": {"imagefile": str(tmp_path / "images")}})


IMAGE_TRANSFERS = """
[deploy-imagetransfer]
transfer-mechanism: multicast
diskimage-reuse: image-caches
diskimage-cache-size: 4096
"""


def imagetransfer_site(tmp_path, images: bytes, **values: str):
    """The quickstart with image transfers, [tracefile] imagefile `images`, and any option set to one of `values`."""
    text = (QS / "quickstart.conf").read_text().replace("tracefile: quickstart.lwf",
                                                         f"tracefile: {QS / 'quickstart.lwf'}\nimagefile: images")
    text = text.replace("lease-preparation: unmanaged", "lease-preparation: imagetransfer") + IMAGE_TRANSFERS
    for option, value in values.items():
        option = option.replace("_", "-")
        text, n = re.subn(rf"(?m)^{option}: .*$", f"{option}: {value}", text)
        assert n == 1, option
    (tmp_path / "images").write_bytes(images)
    (tmp_path / "site.conf").write_text(text)
    return tmp_path / "site.conf"


@pytest.mark.parametrize("images, values, message", [
    (b"a.img 600\n#\nb.img\n", {}, "images:3: image 'b.img' has no size in the first part"),
    (b"a.img\n#\na.img\n", {}, "images:1: expected `image-name size-in-MB`"),
    (b"a.img 600 7\n#\na.img\n", {}, "images:1: expected `image-name size-in-MB`"),
    (b"a.img -5\n#\na.img\n", {}, "images:1: image 'a.img': size -5 must be positive"),
    (b"a.img 0\n#\na.img\n", {}, "images:1: image 'a.img': size 0 must be positive"),
    (b"a.img 2147483648\n#\na.img\n", {}, "images:1: image 'a.img': size 2147483648 is too large"),
    ("a.img \u00b2\n#\na.img\n".encode(), {}, "images:1: image 'a.img': size '\u00b2' is not a whole number"),
    ("a.img \u0663\n#\na.img\n".encode(), {}, "images:1: image 'a.img': size '\u0663' is not a whole number"),
    (b"a.img 600\na.img 700\n#\na.img\n", {}, "images:2: image 'a.img' was given 600 MB on an earlier line"),
    (b"a.img 600\n#\n\xff\xfe\n", {}, "images:3: not UTF-8 text"),
    (b"a.img 600\n" + b"x" * 100_000, {}, "images:2: a line longer than"),
    (b"".join(b"i%d 1\n" % k for k in range(100_001)) + b"#\ni0\n", {}, "images:100001: more than 100,000 distinct"),
    (b"a.img 600\n#\na.img\n", {"diskimage_cache_size": "0"}, "diskimage-cache-size: '0' must be positive"),
    (b"a.img 600\n#\na.img\n", {"diskimage_cache_size": "-4096"}, "diskimage-cache-size: '-4096' must be positive"),
    (b"a.img 600\n#\na.img\n", {"imagetransfer_bandwidth": "0"}, "imagetransfer-bandwidth: '0' must be positive"),
    (b"a.img 600\n#\na.img\n", {"imagetransfer_bandwidth": "1e3"}, "imagetransfer-bandwidth: '1e3' is not a whole"),
    (b"a.img 600\n#\na.img\n", {"transfer_mechanism": "broadcast"}, "transfer-mechanism"),
], ids=["unknown-image", "no-size", "three-fields", "negative", "zero", "over-32-bits", "superscript",
        "arabic-indic", "two-sizes", "not-utf8", "huge-line", "too-many-images", "cache-0", "cache-negative", "bandwidth-0",
        "bandwidth-exponent", "mechanism"])
def test_bad_image_files_and_transfer_options_are_one_line_from_the_cli(cli, tmp_path, images, values, message):
    proc = cli("simulate", "-c", imagetransfer_site(tmp_path, images, **values), "-q")
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def slow_link_site(tmp_path, sizes: list[int]) -> Path:
    """One node, a 1 Mbit/s link sending one copy after another, and a best-effort lease of a minute per image size
    (a text LWF), all arriving at once."""
    (tmp_path / "big.lwf").write_text("".join(f"0 -1 60 60 1 1 512 0 'i{k}.img' {size}\n"
                                              for k, size in enumerate(sizes)))
    conf = tmp_path / "site.conf"
    conf.write_text(render_config({
        "general": {"mode": "simulated", "lease-preparation": "imagetransfer"},
        "simulation": {"clock": "simulated", "starttime": "2006-11-25 13:00:00", "resources": "1 CPU:100 Memory:1024",
                       "imagetransfer-bandwidth": 1},
        "scheduling": {"suspension": "all", "suspend-rate": 32, "resume-rate": 32}, "accounting": {},
        "deploy-imagetransfer": {"transfer-mechanism": "unicast"},
        "tracefile": {"tracefile": str(tmp_path / "big.lwf"), "format": "lwf-text"}}))
    return conf


def test_transfers_past_the_calendar_are_one_line_from_the_cli(cli, tmp_path):
    """Every image and lease is within its bounds, but 88-year transfers one after another (350,000,000 MB at
    1 Mbit/s) run the clock past the year 9999: one line, not an overflow."""
    proc = cli("simulate", "-c", slow_link_site(tmp_path, [350_000_000] * 100))
    assert proc.returncode != 0 and "outside the years 1 to 9999" in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_nothing_is_booked_more_than_a_century_ahead(tmp_path):
    """Three 88-year transfers in line: the second lease is booked only once its start is within a century (it
    waits in the queue meanwhile), and a lease whose transfer alone outlasts a century is refused on arrival."""
    result, log = simulate_log(slow_link_site(tmp_path, [350_000_000] * 3 + [2_147_483_647]))
    booked = [(line[1:20], line.split(" from ")[1][:19]) for line in log.splitlines()
              if "can be scheduled on nodes" in line]
    assert len(booked) == 3
    for when, start in booked:
        ahead = datetime.fromisoformat(start) - datetime.fromisoformat(when)
        assert ahead.days <= 100 * 365
    assert [lease.state.name for lease in result.leases][:3] == ["DONE"] * 3
    assert result.leases[3].state.name == "REJECTED" and "more than 100 years" in result.leases[3].reason


def test_imagefile_is_read_only_as_far_as_the_requests_go(tmp_path):
    """The quickstart has two requests: what follows their two images is never read (a huge file costs nothing)."""
    (tmp_path / "images").write_bytes(b"a.img 600\n#\na.img\na.img\n" + b"\xff" * 100_000)
    images = read_imagefile(tmp_path / "images", wanted=2)
    assert [(i.id, i.size) for i in images] == [("a.img", 600)] * 2
    with pytest.raises(InputError, match="images:5: a line longer than"):
        read_imagefile(tmp_path / "images")


def test_injection_file_adds_ar_requests(tmp_path):
    (tmp_path / "inj.lwf").write_text("# submit start dur realdur nodes cpu mem disk image size\n"
                                      "600 7200 1800 1800 2 1 1024 0 'NONE.img' 600\n")
    result, log = quickstart(tmp_path, {"tracefile": {"injectionfile": str(tmp_path / "inj.lwf")}})
    assert len(result.leases) == 3
    assert "Loaded workload with 3 requests (1 Best-effort + 2 AR)" in log
    summary = run_summary(result.site, result.leases, result.end_time)
    assert summary["ar"] == {"accepted": 2, "rejected": 0}


@pytest.mark.parametrize("stop_when, end", [("all-leases-done", "14:31:04"), ("besteffort-submitted", "13:00:00")],
                         ids=["all-done", "be-submitted"])
def test_stop_when(tmp_path, stop_when, end):
    result, log = quickstart(tmp_path, {"simulation": {"stop-when": stop_when}})
    assert "13:00:00.00] CLOCK   Starting" in log
    assert f"{end}.00] CLOCK   Simulated clock has stopped" in log


def test_status_messages_every_interval(tmp_path):
    _, log = quickstart(tmp_path, {"simulation": {"status-message-interval": "30"}})
    assert log.count("--- Haizea status summary ---") >= 3  # 13:30, 14:00 and the final one


def test_admission_policy_no_ars(tmp_path):
    result, log = quickstart(tmp_path, {"scheduling": {"policy-admission": "no-ARs"}})
    assert "Lease #2 has not been accepted: advance reservations are not accepted" in log
    assert vm_spans(result.leases[0]) == [(0, 3600)]  # nothing preempted it


def test_no_preemption_policy_rejects_the_ar(tmp_path):
    result, log = quickstart(tmp_path, {"scheduling": {"policy-preemption": "no-preemption"}})
    assert "Lease request #2 cannot be scheduled: Not enough resources in specified interval" in log


def test_custom_host_policy_by_dotted_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "tests" / "data" / "policies"))
    _, log = quickstart(tmp_path, {"scheduling": {"policy-host-selection": "youngest_host.HighestNodeFirst"}})
    assert "Lease #1 can be scheduled on nodes [4]" in log


def test_unloadable_policy_is_named(tmp_path):
    with pytest.raises(InputError, match=r"policy-preemption: cannot load policy 'nowhere.Policy'"):
        quickstart(tmp_path, {"scheduling": {"policy-preemption": "nowhere.Policy"}})


def test_datafile_holds_the_run_and_every_lease(cli, tmp_path):
    from optlease.accounting.datafile import read_run

    conf = tmp_path / "qs.conf"
    conf.write_text((QS / "quickstart.conf").read_text().replace("tracefile: quickstart.lwf",
                                                                  f"tracefile: {QS / 'quickstart.lwf'}")
                    .replace("[accounting]\n", "[accounting]\ndatafile: run.parquet\n"))
    proc = cli("simulate", "-c", conf, "-q")
    assert proc.returncode == 0, proc.stderr
    data = read_run(tmp_path / "run.parquet")
    assert data.per_run["best_effort_completed"] == 1
    lease1 = data.per_lease[0]
    assert (lease1["waiting_time"], lease1["end"], lease1["suspensions"]) == (0, 5464, 1)
    assert data.attrs["configuration"] == conf.read_text()