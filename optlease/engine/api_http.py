"""The request API's HTTP side: a threaded XML-RPC server that no single client can stall, flood or crash.

Each connection is served on its own thread with a socket timeout, so an idle or slow connection holds only its
own thread: for at most IDLE_TIMEOUT seconds without a byte, and READ_DEADLINE seconds to send one whole request
(a client trickling a byte now and then is cut off too); at most MAX_CONNECTIONS are served at once (more are
answered 503 at once, never left to hang). The listen backlog is deep enough for bursts of concurrent clients
without SYN retries or resets. A body is at most MAX_BODY_BYTES, after decompression too (gzip and deflate are
inflated up to that size, never further). Every failure reaches the client as a Fault in the user's terms: no
Python class, traceback or parser name.
"""
from __future__ import annotations

import hmac
import io
import logging
import re
import socketserver
import socket
import threading
import time
import zlib
from typing import NamedTuple
from xmlrpc.client import Fault, dumps, loads
from xmlrpc.server import SimpleXMLRPCRequestHandler, SimpleXMLRPCServer

MAX_BODY_BYTES = 256 * 1024
IDLE_TIMEOUT = 10.0          # seconds a connection may stay silent (between requests, or mid-request)
READ_DEADLINE = 30.0         # seconds from a request's first wait to its last byte (headers and body)
MAX_CONNECTIONS = 64         # connections served at once: each is a thread
BACKLOG = 128                # accepted by the kernel while every thread is busy (32+ clients connect at once)
_LENGTH = re.compile(r"[0-9]{1,12}", re.ASCII)

log = logging.getLogger("optlease.api")


class Encoded(NamedTuple):
    """A method's whole XML-RPC answer, already encoded (what dumps would write; a large answer built from parts
    cached as they were encoded)."""

    body: bytes


class ApiServer(socketserver.ThreadingMixIn, SimpleXMLRPCServer):
    """SimpleXMLRPCServer with a thread per connection, a connection cap, and Faults that name no internals."""

    daemon_threads = True            # a stuck client never keeps the daemon from exiting
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = BACKLOG

    def __init__(self, address: tuple[str, int], token: str | None) -> None:
        self.expected_path = "/" + token if token else None
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, requestHandler=Handler, logRequests=False, allow_none=True,
                         bind_and_activate=True)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                b"Connection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def _marshaled_dispatch(self, data: bytes, dispatch_method=None, path=None) -> bytes:
        try:
            params, method = loads(data, use_builtin_types=self.use_builtin_types)
        except Exception:        # expat, a bad value, nesting past the recursion limit...
            return self._fault(Fault(1, "the request is not a well-formed XML-RPC call"))
        try:
            result = self._dispatch(method, params)
            if isinstance(result, Encoded):
                return result.body
            response = dumps((result,), methodresponse=True, allow_none=True, encoding=self.encoding)
        except Fault as fault:
            return self._fault(fault)
        except Exception:
            log.exception("internal error in %s", method)
            return self._fault(Fault(1, f"internal error in {str(method)[:40]}; the daemon's log has the details"))
        return response.encode(self.encoding, "xmlcharrefreplace")

    def _fault(self, fault: Fault) -> bytes:
        return dumps(fault, allow_none=True, encoding=self.encoding).encode(self.encoding, "xmlcharrefreplace")


class Handler(SimpleXMLRPCRequestHandler):
    rpc_paths = ("/", "/RPC2")
    protocol_version = "HTTP/1.1"    # keep-alive: a client's next call skips the TCP handshake
    timeout = IDLE_TIMEOUT           # StreamRequestHandler puts it on the socket: every read and write is bounded

    def setup(self) -> None:
        super().setup()
        self.deadline = time.monotonic() + READ_DEADLINE
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self), io.DEFAULT_BUFFER_SIZE)

    def handle_one_request(self) -> None:
        self.deadline = time.monotonic() + READ_DEADLINE     # each request on a kept-alive connection anew
        super().handle_one_request()

    def is_rpc_path_valid(self) -> bool:
        expected = self.server.expected_path
        if expected is None:
            return self.path in self.rpc_paths
        return hmac.compare_digest(self.path.encode(), expected.encode())

    def do_POST(self) -> None:
        length = self.headers.get("content-length", "")
        if not _LENGTH.fullmatch(length.strip()):
            self._refuse(411 if not length else 400)
            return
        if int(length) > MAX_BODY_BYTES:
            self._refuse(413)
            return
        super().do_POST()

    def decode_request_content(self, data: bytes) -> bytes | None:
        """The body as sent, or inflated (gzip, deflate) to at most MAX_BODY_BYTES; None once refused."""
        encoding = self.headers.get("content-encoding", "identity").strip().lower()
        if encoding == "identity":
            return data
        if encoding not in ("gzip", "x-gzip", "deflate"):
            self._refuse(415)
            return None
        inflater = zlib.decompressobj(zlib.MAX_WBITS | (16 if "gzip" in encoding else 0))
        try:
            body = inflater.decompress(data, MAX_BODY_BYTES + 1)
        except zlib.error:
            self._refuse(400)
            return None
        if len(body) > MAX_BODY_BYTES or inflater.unconsumed_tail:
            self._refuse(413)
            return None
        if not inflater.eof:
            self._refuse(400)
            return None
        return body

    def _refuse(self, code: int) -> None:
        self.send_response(code)
        self.send_header("Content-length", "0")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def report_404(self) -> None:
        self._refuse(404)

    def log_message(self, format: str, *args) -> None:
        pass


class _DeadlineReader(socket.SocketIO):
    """The connection's reads, each bounded by the idle timeout and by what is left of the request's deadline."""

    def __init__(self, sock: socket.socket, handler: Handler) -> None:
        super().__init__(sock, "rb")
        self.handler = handler

    def readinto(self, buffer) -> int:
        left = self.handler.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request took too long to arrive")
        self._sock.settimeout(min(IDLE_TIMEOUT, left))
        return super().readinto(buffer)
