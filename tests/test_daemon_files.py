"""The daemon's files as an operator and an attacker on the same machine meet them: the database, log and pid file
private to their owner; a symbolic link planted at the pid file's or log's place refused, never written through;
`serve --stop` signalling only the optlease daemon that holds the pid file; no fixed name in the shared temporary
folder when there is no persistence file."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from conftest import REPO, run_cli, wait_until
from mqtt_broker import free_port
from optlease.formats.daemon_config import daemon_config

SCHEDULING = {"suspension": "none"}



def write_conf(tmp_path, persistence: str = "state.db", daemon: dict | None = None, general: dict | None = None):
    text = daemon_config(port=free_port(), persistence_file=persistence, resources="2 CPU:100 Memory:1024",
                         scheduling=SCHEDULING, general=general)
    if daemon:
        text += "".join(f"{k}: {v}\n" for k, v in daemon.items())     # [daemon] is the last section
    conf = tmp_path / "d.conf"
    conf.write_text(text)
    return conf


def cli_env(*args, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "optlease.cli.main", *map(str, args)], cwd=REPO, timeout=60,
                          capture_output=True, text=True, env={**os.environ, **env})


def one_line_error(out: subprocess.CompletedProcess) -> str:
    assert out.returncode != 0 and out.stderr.count("\n") == 1, (out.returncode, out.stderr)
    assert out.stderr.startswith("optlease: error: ") and "Traceback" not in out.stderr
    return out.stderr


@pytest.mark.parametrize("what, section", [("pidfile", "daemon"), ("logfile", "general")])
def test_a_symlink_at_the_pid_file_or_log_is_refused(tmp_path, what, section):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "planted").symlink_to(victim)
    conf = write_conf(tmp_path, "none", **{section: {what: "planted"}})
    err = one_line_error(run_cli("serve", "-c", conf, "--fg", timeout=60))
    assert "symbolic link" in err, err
    assert victim.read_text() == "precious\n"


def test_stop_never_signals_a_process_that_is_not_the_daemon(tmp_path):
    conf = write_conf(tmp_path)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "state.db.pid").write_text(f"{bystander.pid}\n")
        err = one_line_error(run_cli("serve", "-c", conf, "--stop", timeout=60))
        assert "no optlease daemon is running" in err and "not signalled" in err, err
        assert bystander.poll() is None           # alive: nobody signalled it
    finally:
        bystander.kill()
        bystander.wait()


def test_daemon_files_are_private_and_stop_finds_the_real_daemon(tmp_path):
    conf = write_conf(tmp_path)
    started = run_cli("serve", "-c", conf, timeout=60)
    assert started.returncode == 0, started.stderr
    try:
        pid = int((tmp_path / "state.db.pid").read_text())
        for name in ("state.db", "state.db.log", "state.db.pid"):
            mode = stat.S_IMODE((tmp_path / name).stat().st_mode)
            assert mode & 0o077 == 0, (name, oct(mode))
        again = run_cli("serve", "-c", conf, "--fg", timeout=60)      # a second daemon on the same files
        assert f"already runs with pid {pid}" in one_line_error(again)
    finally:
        stopped = run_cli("serve", "-c", conf, "--stop", timeout=60)
    assert stopped.returncode == 0 and f"Stopped optlease daemon with pid {pid}" in stopped.stdout, stopped.stderr
    wait_until(lambda: not (tmp_path / "state.db.pid").exists(), 10, "the pid file removed")


def test_without_persistence_the_pid_file_is_in_a_private_folder(tmp_path):
    conf = write_conf(tmp_path, "none")
    env = {"TMPDIR": str(tmp_path), "XDG_RUNTIME_DIR": ""}
    out = cli_env("serve", "-c", conf, "--stop", env=env)
    folder = tmp_path / f"optlease-{os.getuid()}"
    assert f"pid file {folder}/optlease-" in one_line_error(out)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@pytest.mark.parametrize("plant", ["open-folder", "symlink"])
def test_a_shared_or_planted_runtime_folder_is_refused(tmp_path, plant):
    conf = write_conf(tmp_path, "none")
    folder = tmp_path / f"optlease-{os.getuid()}"
    if plant == "open-folder":
        folder.mkdir()
        folder.chmod(0o777)
    else:
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        folder.symlink_to(tmp_path / "elsewhere")
    err = one_line_error(cli_env("serve", "-c", conf, "--fg", env={"TMPDIR": str(tmp_path), "XDG_RUNTIME_DIR": ""}))
    assert "not a private folder" in err, err
    assert not any((tmp_path / "elsewhere").glob("*")) if plant == "symlink" else not any(folder.glob("*"))
