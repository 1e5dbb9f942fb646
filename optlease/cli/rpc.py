"""XML-RPC calls of the client commands, without typer: a refusal or a daemon that is not there is one line
(`Refused`), and a server URL is never shown with its secret part (the daemon's token in the path)."""
from __future__ import annotations

import http.client
import socket
import xmlrpc.client
from urllib.parse import urlsplit

TIMEOUT = 30.0
MAX_ANSWER_BYTES = 16 * 1024 * 1024     # a bounded answer (a page of the lease table) is at most this


class Refused(Exception):
    """A call that failed, with the one line that says why."""


class BadAnswer(Exception):
    """An answer the client will not read (too large, encoded when it was not asked to be)."""


def public_url(server: str) -> str:
    """The server URL as messages show it: the path (where the daemon's token goes) and any user:password
    replaced by `...`, so that an error message pasted into a ticket gives no secret away."""
    parts = urlsplit(server)
    host = parts.netloc.rpartition("@")[2]
    secret = parts.path not in ("", "/", "/RPC2") or "@" in parts.netloc or parts.query
    return f"{parts.scheme}://{host}/..." if secret else f"{parts.scheme}://{host}{parts.path}"


class _Transport(xmlrpc.client.Transport):
    def make_connection(self, host):
        conn = super().make_connection(host)
        conn.timeout = TIMEOUT
        return conn


class _Bounded(_Transport):
    """Answers read whole (one parse, not one per KiB) and at most MAX_ANSWER_BYTES, uncompressed on the wire
    (the lease table comes compressed already; a loopback has no use for gzip)."""

    accept_gzip_encoding = False

    def parse_response(self, response):
        if response.getheader("Content-Encoding", "identity") != "identity":
            raise BadAnswer("the server sent an encoded answer that was not asked for")
        data = response.read(MAX_ANSWER_BYTES + 1)
        if len(data) > MAX_ANSWER_BYTES:
            raise BadAnswer(f"its answer is larger than {MAX_ANSWER_BYTES} bytes")
        parser, unmarshaller = self.getparser()
        parser.feed(data)
        parser.close()
        return unmarshaller.close()


class _BoundedTLS(_Bounded, xmlrpc.client.SafeTransport):
    pass


class Client:
    """Calls to one server on one kept-alive connection; `bounded`: answers of at most MAX_ANSWER_BYTES."""

    def __init__(self, server: str, bounded: bool = False) -> None:
        if not server.startswith(("http://", "https://")):
            raise Refused(f"server {public_url(server) if '://' in server else 'URL'} is not an http:// URL")
        self.server = server
        tls = server.startswith("https://")
        transport = (_BoundedTLS() if tls else _Bounded()) if bounded else \
            (xmlrpc.client.SafeTransport() if tls else _Transport())
        try:
            self.proxy = xmlrpc.client.ServerProxy(server, transport=transport, allow_none=True)
        except (OSError, ValueError) as exc:
            raise Refused(self._unreachable(exc)) from None

    def __call__(self, method: str, *args):
        server, shown = self.server, public_url(self.server)
        try:
            return getattr(self.proxy, method)(*args)
        except xmlrpc.client.Fault as exc:
            raise Refused(redact(str(exc.faultString).replace("\n", " "), server)) from None
        except xmlrpc.client.ProtocolError as exc:
            raise Refused(f"{shown}: {exc.errcode} {redact(exc.errmsg, server)}") from None
        except BadAnswer as exc:
            raise Refused(f"{shown}: {exc}") from None
        except (OSError, http.client.HTTPException, socket.timeout, ValueError) as exc:
            raise Refused(self._unreachable(exc)) from None
        except Exception:   # noqa: BLE001 - expat, a bad value: the answer is not XML-RPC
            raise Refused(f"{shown}: the answer is not a well-formed XML-RPC answer") from None

    def _unreachable(self, exc: Exception) -> str:
        why = redact(getattr(exc, "strerror", None) or str(exc) or type(exc).__name__, self.server)
        return f"cannot reach the lease manager at {public_url(self.server)} ({why}); is `optlease serve` running?"

    def close(self) -> None:
        self.proxy("close")()


def rpc(server: str, method: str, *args):
    """One XML-RPC call; Refused (one line) for a refusal or a daemon that is not there."""
    client = Client(server)
    try:
        return client(method, *args)
    finally:
        client.close()


def unknown_method(refusal: Refused) -> bool:
    """Whether a refusal says the server has no such method (optlease's words, or Python's and Haizea's)."""
    text = str(refusal)
    return "unknown method" in text or "is not supported" in text


def redact(text: str, server: str) -> str:
    path = urlsplit(server).path.strip("/")
    text = text.replace(server, public_url(server))
    return text.replace(path, "...") if path and path != "RPC2" else text
