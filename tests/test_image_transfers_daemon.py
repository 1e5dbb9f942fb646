"""The daemon with `lease-preparation: imagetransfer` (docs/enactment.md, image transfers): `optlease serve` as a
process accepts the configuration, and a lease's plan waits for its image's transfer over the repository's link."""
from __future__ import annotations

from datetime import datetime

from conftest import daemon_config, run_cli
from mqtt_broker import free_port

IMAGES = """
[deploy-imagetransfer]
transfer-mechanism: multicast
diskimage-reuse: image-caches
diskimage-cache-size: 4096
"""


def starts(server: str) -> dict[int, datetime]:
    out = run_cli("list-leases", "-s", server, timeout=30)
    assert out.returncode == 0, out.stderr
    rows = {}
    for line in out.stdout.splitlines()[1:]:
        cells = line.split()
        rows[int(cells[0])] = datetime.fromisoformat(f"{cells[3]} {cells[4][:8]}")
    return rows


def test_the_daemon_plans_each_start_after_its_image_arrives(tmp_path):
    port = free_port()
    conf = tmp_path / "d.conf"
    conf.write_text(daemon_config(port, general="lease-preparation: imagetransfer\n", sections=IMAGES))
    server = f"http://127.0.0.1:{port}"
    out = run_cli("serve", "-c", conf, timeout=40)
    assert out.returncode == 0, out.stderr
    try:
        # 1000 MB at 100 Mbit/s: 80 s on the link, before either VM may start
        for n in (2, 1):
            req = run_cli("request-lease", "-s", server, "-t", "best_effort", "-d", "00:10:00", "-n", str(n),
                          "-i", "big.img", "-z", "1000", timeout=30)
            assert req.returncode == 0, req.stderr
        log = (tmp_path / "state.db.log").read_text()
        assert "DEPLOY  Starting image transfer for lease 1" in log
        requested = datetime.fromisoformat(log.split("Lease #1 has been requested.")[0].rsplit("[", 1)[1][:19])
        planned = starts(server)
        assert (planned[1] - requested).total_seconds() == 80
        # lease 2's image comes by a transfer of its own once the link is free (the first one had begun)
        assert (planned[2] - planned[1]).total_seconds() == 80
    finally:
        stop = run_cli("serve", "-c", conf, "--stop", timeout=40)
    assert stop.returncode == 0, stop.stderr
