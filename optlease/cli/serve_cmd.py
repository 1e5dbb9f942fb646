"""`optlease serve`: the lease manager daemon (background by default, `--fg` in the foreground, `--stop`)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import xmlrpc.client
from pathlib import Path
from typing import Annotated

import typer

from optlease.cli.app import app
from optlease.cli.daemon_files import PidFile, holder, open_log, runtime_dir
from optlease.errors import InputError

START_TIMEOUT = 20.0
STOP_TIMEOUT = 15.0


def _runtime_file(cfg, suffix: str) -> Path:
    from optlease.engine.api import parse_listen

    persistence = cfg.get("general", "persistence-file")
    if persistence != "none":
        return Path(str(cfg.resolve(persistence)) + suffix)
    port = parse_listen(cfg.get("daemon", "listen"))[1]
    return runtime_dir() / f"optlease-{port}{suffix}"


def pid_file(cfg) -> Path:
    given = cfg.get("daemon", "pidfile")
    return cfg.resolve(given) if given else _runtime_file(cfg, ".pid")


def log_file(cfg) -> Path:
    given = cfg.get("general", "logfile")
    return cfg.resolve(given) if given else _runtime_file(cfg, ".log")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _url(cfg) -> str:
    from optlease.engine.api import parse_listen

    host, port = parse_listen(cfg.get("daemon", "listen"))
    host = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    token = cfg.get("daemon", "token")
    return f"http://{host}:{port}/{token or ''}"


def serve_foreground(cfg, out) -> int:
    """The daemon, holding its pid file (and so its database) from before it opens anything until it stops."""
    pidf = PidFile(pid_file(cfg))
    pidf.acquire()
    try:
        return _serve(cfg, out)
    finally:
        pidf.release()


def _serve(cfg, out) -> int:
    from optlease.engine.api import make_server
    from optlease.engine.atomic import Stopped
    from optlease.engine.daemon import Manager

    _log_enactment(out, cfg.get("general", "loglevel"))
    manager = Manager(cfg, out)
    for note in manager.notes:
        manager.log.status("RM", note)
    try:
        manager.catch_up()   # before anyone is served: no request lands between the instants missed while down
    except Stopped:
        manager.stop()
        raise InputError(manager.fatal) from None
    try:
        server = make_server(manager, cfg.get("daemon", "listen"), cfg.get("daemon", "token"))
    except OSError as exc:
        manager.stop()
        raise InputError(f"[daemon] listen {cfg.get('daemon', 'listen')}: {exc.strerror or exc}") from None
    except InputError:
        manager.stop()
        raise
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    manager.log.status("RM", f"Started optlease daemon with pid {os.getpid()}, listening on "
                             f"{cfg.get('daemon', 'listen')}")
    manager.start()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    try:
        while not done.wait(0.5) and manager.fatal is None:
            pass
    finally:
        manager.log.status("RM", "Stopping optlease daemon gracefully...")
        server.shutdown()
        server.server_close()
        manager.stop()
        if out is not None:
            out.flush()
    if manager.fatal is not None:
        # an error, or lease-failure-handling exit / exit-raise: the log has the line, and so does stderr
        print(f"optlease: {manager.fatal}", file=sys.stderr)
        return manager.fatal_rc
    return 0


def _log_enactment(out, level: str) -> None:
    """The MQTT enactor's messages (a lost broker, retries, errors, hosts coming and going) go to the daemon's log."""
    if out is None:
        return
    import logging

    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(name)-22s %(message)s", "%Y-%m-%d %H:%M:%S"))
    logger = logging.getLogger("optlease.enact")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if level in ("INFO", "DEBUG", "VDEBUG") else logging.WARNING)
    logger.propagate = False


def start_background(conf: Path, cfg) -> int:
    pidf = pid_file(cfg)
    other, _ = holder(pidf)
    if other is not None:
        raise InputError(f"an optlease daemon already runs with pid {other} (pid file {pidf})")
    logf = log_file(cfg)
    with open_log(logf) as log, open(os.devnull) as devnull:
        proc = subprocess.Popen([sys.executable, "-m", "optlease.cli.main", "serve", "-c", str(conf), "--fg",
                                 "--log-to-file"], stdin=devnull, stdout=log, stderr=log,
                                start_new_session=True, close_fds=True)
    proxy = xmlrpc.client.ServerProxy(_url(cfg))
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            lines = [ln for ln in logf.read_text(errors="replace").splitlines() if ln.strip()]
            raise InputError(f"the daemon did not start: {lines[-1] if lines else 'no message'} (log {logf})")
        try:
            proxy.test_func()
            print(f"Started optlease daemon with pid {proc.pid}")
            return 0
        except (OSError, xmlrpc.client.Error):
            time.sleep(0.1)
    os.kill(proc.pid, signal.SIGTERM)
    raise InputError(f"the daemon did not answer within {START_TIMEOUT:.0f} s (log {logf})")


def stop_daemon(cfg) -> int:
    pidf = pid_file(cfg)
    pid, why = holder(pidf)
    if pid is None:
        print(f"optlease: error: no optlease daemon is running (pid file {pidf}: {why})", file=sys.stderr)
        return 1
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline:
        if not _alive(pid):
            print(f"Stopped optlease daemon with pid {pid}")
            return 0
        time.sleep(0.1)
    print(f"optlease: error: the daemon (pid {pid}) did not stop within {STOP_TIMEOUT:.0f} s", file=sys.stderr)
    return 1


@app.command()
def serve(
    conf: Annotated[Path, typer.Option("-c", "--conf", help="Configuration file.", envvar="OPTLEASE_CONF")],
    fg: Annotated[bool, typer.Option("--fg", "-f", help="Run in the foreground, logging to the console "
                                     "(or to [general] logfile when set).")] = False,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the running daemon.")] = False,
    log_to_file: Annotated[bool, typer.Option("--log-to-file", hidden=True)] = False,
) -> int:
    """Run the lease manager daemon: the request API (Haizea's XML-RPC) and scheduling on a real clock."""
    from optlease.formats.config import load_config

    os.umask(0o077)      # the database, its journal, the log and the pid file are the operator's alone
    cfg = load_config(conf)
    if cfg.get("general", "mode") == "simulated" and cfg.get("simulation", "clock") != "real":
        raise InputError("optlease serve needs [simulation] clock: real (clock: simulated is optlease simulate's)",
                         cfg.path)
    if stop:
        raise typer.Exit(stop_daemon(cfg))
    if not fg:
        return start_background(conf, cfg)
    if log_to_file or cfg.get("general", "logfile"):
        with open_log(log_file(cfg)) as out:
            rc = serve_foreground(cfg, out)
    else:
        rc = serve_foreground(cfg, _LineFlush(sys.stdout))
    if rc:
        raise typer.Exit(rc)
    return rc


class _LineFlush:
    """Console output flushed line by line (the log is read while the daemon runs)."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def flush(self) -> None:
        self.stream.flush()
