"""A checkpoint written by a forked child, so that the daemon keeps serving while its live state is pickled.

Pickling the live half costs about 0.7 s of CPU per 10,000 leases in the system; done in the daemon's turn, every
request waited for it. Instead the daemon forks, under its lock and between two steps: the child is a copy-on-write
image of the process exactly as the journal stands at that entry. The child pickles the live half into an unnamed
temporary file beside the persistence file, followed by the pickle's size and digest (`seal`), and exits. It touches
no SQLite connection, socket or lock of the parent (it closes every descriptor it inherited but its file, first) and
never returns into the daemon's code (`os._exit`). The parent, once the child has exited, checks the file (exit
status 0, size, digest: `unseal`) and commits it with the journal position the image covers (the Manager, through
Store.stage_checkpoint and Store.add_checkpoint). A child that dies, or a file that is not what it wrote, leaves
the journal as it was.
"""
from __future__ import annotations

import gc
import hashlib
import os
import signal
import struct
import tempfile
import time
from dataclasses import dataclass
from typing import Iterator

from optlease.engine import checkpoint
from optlease.engine.checkpoint import CheckpointError

TRAILER = struct.Struct(">Q32s")      # after the pickle: its size and its blake2b digest
GONE = -1                             # the wait status of a child that someone else reaped
# a child still writing after this many seconds is taken to hang (a lock another thread held at the fork) and
# killed: the journal stays as it was. About a hundred times the CPU the largest measured checkpoint takes.
CHILD_DEADLINE_S = 900.0
POLL_S = 0.05                         # how often a caller that waits for the child looks again


@dataclass
class Child:
    """A checkpoint being written by a child process."""

    pid: int
    file: object          # the temporary file, as the parent holds it
    seq: int              # the last journal entry the image covers
    last_id: int          # the last request it covers
    leases: int           # leases in the system (and requests not yet stepped) it holds
    fork_s: float         # seconds the fork held the daemon
    deadline: float       # time.monotonic() past which the child is taken to hang
    killed: bool = False  # killed for passing its deadline


def fork(manager, folder: str, seq: int, last_id: int) -> Child:
    """Start a child that writes the manager's live half (lock held: the image is the state after entry `seq`)."""
    file = tempfile.TemporaryFile(dir=folder)
    leases = len(manager.sched.leases) + len(manager.inbox)
    began = time.perf_counter()
    # every object out of the collector's sight until the child is done: a full collection here would write to
    # each object's header, and so copy every page the child still shares (`release` gives them back)
    gc.freeze()
    try:
        pid = os.fork()
    except BaseException:
        gc.unfreeze()
        raise
    if pid == 0:
        _write(manager, file.fileno())        # never returns
    return Child(pid, file, seq, last_id, leases, time.perf_counter() - began, time.monotonic() + CHILD_DEADLINE_S)


def _write(manager, fd: int) -> None:
    """In the child: the live half into the file, sealed; exit 0 when all of it is written, else 1."""
    status = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)      # the daemon's handlers are the parent's business
        gc.disable()
        # nothing of the parent's stays open here (its database, its sockets, its pid file's lock)
        os.closerange(3, fd)
        os.closerange(fd + 1, os.sysconf("SC_OPEN_MAX"))
        with open(fd, "wb", buffering=1 << 20, closefd=False) as raw:
            out = _Sealing(raw)
            checkpoint.dump_to(manager, out)
            raw.write(TRAILER.pack(out.size, out.digest.digest()))
        status = 0
    except BaseException:  # noqa: BLE001 - whatever happens here, the child only exits; the parent says why
        pass
    finally:
        os._exit(status)


class _Sealing:
    """A file that counts and digests what is written to it (blake2b: Python's own, no library lock)."""

    def __init__(self, out) -> None:
        self.out = out
        self.size = 0
        self.digest = hashlib.blake2b(digest_size=32)

    def write(self, data) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.out.write(data)


def exited(child: Child, wait: bool = False) -> tuple[int, float] | None:
    """The child's wait status and CPU seconds once it has exited (None: still writing). A child past its
    deadline is killed, so that its status says so; `wait` waits no longer than the deadline."""
    while True:
        if not child.killed and time.monotonic() > child.deadline:
            child.killed = True
            try:
                os.kill(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            pid, status, usage = os.wait4(child.pid, 0 if child.killed else os.WNOHANG)
        except ChildProcessError:       # reaped by someone else (SIGCHLD ignored): its outcome is unknown
            return GONE, 0.0
        if pid:
            return status, usage.ru_utime + usage.ru_stime
        if not wait:
            return None
        time.sleep(POLL_S)


def sealed_parts(child: Child, status: int, part: int) -> tuple[int, Iterator[bytes]]:
    """What the child wrote (the pickle and its seal), checked, as its size and its bytes in parts of `part` bytes
    read from the file as they are stored (the daemon never holds the whole of it); CheckpointError (one line) if it
    did not finish or the file is not what it wrote."""
    if status == GONE:
        raise CheckpointError("the child writing it was reaped by another part of the process")
    if os.WIFSIGNALED(status):
        if child.killed:
            raise CheckpointError(f"the child writing it was still at it after {CHILD_DEADLINE_S:.0f} s and was "
                                  f"killed")
        raise CheckpointError(f"the child writing it was killed by signal {os.WTERMSIG(status)}")
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        raise CheckpointError(f"the child writing it failed (exit status {os.waitstatus_to_exitcode(status)})")
    file = child.file
    size = os.fstat(file.fileno()).st_size
    if size < TRAILER.size:
        raise CheckpointError(f"it is truncated ({size} bytes)")
    file.seek(size - TRAILER.size)
    written, digest = TRAILER.unpack(file.read(TRAILER.size))
    if written != size - TRAILER.size:
        raise CheckpointError(f"it is truncated or padded ({size - TRAILER.size} bytes where {written} were "
                              f"written)")
    check = hashlib.blake2b(digest_size=32)
    for chunk in _read(file, written, part):
        check.update(chunk)
    if check.digest() != digest:
        raise CheckpointError("it is corrupt (its digest is not that of its bytes)")
    return size, _read(file, size, part)


def _read(file, size: int, part: int) -> Iterator[bytes]:
    """The file's first `size` bytes, in parts of `part` bytes."""
    file.seek(0)
    left = size
    while left > 0:
        chunk = file.read(min(part, left))
        if not chunk:
            raise CheckpointError("it was cut short while it was being committed")
        left -= len(chunk)
        yield chunk


def unseal(data: bytes) -> memoryview:
    """The pickle in sealed bytes; CheckpointError if they are truncated or corrupt."""
    if len(data) < TRAILER.size:
        raise CheckpointError(f"it is truncated ({len(data)} bytes)")
    size, digest = TRAILER.unpack_from(data, len(data) - TRAILER.size)
    body = memoryview(data)[:len(data) - TRAILER.size]
    if size != len(body):
        raise CheckpointError(f"it is truncated or padded ({len(body)} bytes where {size} were written)")
    if hashlib.blake2b(body, digest_size=32).digest() != digest:
        raise CheckpointError("it is corrupt (its digest is not that of its bytes)")
    return body


def release(child: Child) -> None:
    """The child is done (collected or killed): its file closed, and the objects frozen at the fork back in the
    collector's sight (those frozen when the daemon started too: frozen for good, the cycles among them that
    die would never be freed)."""
    child.file.close()
    gc.unfreeze()


def kill(child: Child) -> None:
    """Stop a child that has not finished (the daemon stops): its file goes with it, the journal stays."""
    try:
        os.kill(child.pid, signal.SIGKILL)
        os.waitpid(child.pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    release(child)
