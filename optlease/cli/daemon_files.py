"""The daemon's own files outside its database: the pid file and the log, private to their owner.

The pid file is created with O_EXCL|O_NOFOLLOW (a symbolic link planted where it goes is refused, never written
through) and stays locked (flock) while the daemon runs. `serve --stop` signals a pid only when the file is held
by a running daemon and that process is an optlease daemon, so a stale file that names an unrelated process (or a
file someone else wrote) makes nobody else's process receive a signal. Without a persistence file the pid file
goes to a per-user folder: `$XDG_RUNTIME_DIR`, else `optlease-<uid>` in the temporary folder, which must be the
user's own and private (as tmux and ssh-agent require of theirs).
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat
import tempfile
from pathlib import Path

from optlease.errors import InputError

PRIVATE = 0o600
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def runtime_dir() -> Path:
    """A folder only this user can write to, for files without a place of their own."""
    given = os.environ.get("XDG_RUNTIME_DIR")
    if given:
        return Path(given)
    folder = Path(tempfile.gettempdir()) / f"optlease-{os.getuid()}"
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise InputError(f"{folder} is not a private folder of this user (a folder with mode 700); remove it, "
                         "or set [daemon] pidfile and [general] logfile")
    return folder


def open_log(path: Path):
    """The log, appended to, created private; a symbolic link in its place is refused."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, PRIVATE)
    except OSError as exc:
        raise InputError(_why(exc, "log file"), str(path)) from None
    return os.fdopen(fd, "a", buffering=1)


class PidFile:
    """The running daemon's pid, in a file it holds locked until it stops."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def acquire(self) -> None:
        """Write this process's pid and lock the file; InputError when another daemon holds it or the path is
        a link or not a plain file of this user's."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW, PRIVATE)
        except FileExistsError:
            try:
                fd = os.open(self.path, os.O_RDWR | _NOFOLLOW)
            except OSError as exc:
                raise InputError(_why(exc, "pid file"), str(self.path)) from None
        except OSError as exc:
            raise InputError(_why(exc, "pid file"), str(self.path)) from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            os.close(fd)
            raise InputError("the pid file is not a plain file of this user's", str(self.path))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 32).decode("ascii", "replace").strip()
            os.close(fd)
            raise InputError(f"an optlease daemon already runs with pid {pid} (pid file {self.path})") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            if os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(self.fd).st_ino:
                self.path.unlink()
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def holder(path: Path) -> tuple[int | None, str]:
    """(pid, "") of the optlease daemon that holds the pid file, or (None, why not)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except FileNotFoundError:
        return None, "no pid file"
    except OSError as exc:
        return None, _why(exc, "pid file")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            held = False
        except BlockingIOError:
            held = True
        text = os.read(fd, 32).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    shown = text[:12] or "nothing"
    if not held:
        return None, f"no daemon holds it (it names {shown}, which is not signalled)"
    if not text.isascii() or not text.isdigit() or not _is_optlease_daemon(int(text)):
        return None, f"it names {shown}, which is not an optlease daemon (not signalled)"
    return int(text), ""


def _is_optlease_daemon(pid: int) -> bool:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return not Path("/proc/self").exists()     # no /proc on this system: the lock alone says it
    except OSError:
        return False
    return b"serve" in args and any(b"optlease" in arg for arg in args)


def _why(exc: OSError, what: str) -> str:
    if exc.errno == errno.ELOOP:
        return f"the {what} is a symbolic link; optlease does not write through links"
    return f"{what}: {exc.strerror or exc}"
