"""A loopback HTTP proxy in front of an S3 endpoint that injects real network faults, request by request.

A rule looks at each request and picks what the proxy does with it: pass it
through, *cut* it (forward it, send the answer's headers and half its body,
then close the socket, as a dropped connection does), make it *short* (half
the body, with a Content-Length that agrees, as a misbehaving middlebox
might), or answer with an S3 error status itself (503, 403, ...) without
forwarding. The faults are real
bytes on a real socket, so botocore and urllib3 see exactly what they would
see from a flaky network; nothing inside the client is patched.

Rules are deterministic: :func:`seeded_cuts` decides from a hash of the
request (the bucket name left out, so a test's random bucket changes
nothing) and how many times the same request came before, never from
arrival order, so a run with worker threads sees the same faults every time.
"""

from __future__ import annotations

import hashlib
import http.client
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

__all__ = ["FaultProxy", "Seen", "cut_first_tries", "pass_all", "seeded_cuts"]

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})
_ERROR_CODES = {403: "AccessDenied", 404: "NoSuchKey", 500: "InternalError", 503: "ServiceUnavailable"}


@dataclass(frozen=True)
class Seen:
    """One request as the proxy saw it, and what it did with it."""

    method: str
    path: str
    range: str | None
    repeat: int
    """How many times this same (method, path, range) came before: 0 for a first try."""
    action: str = "pass"
    """``pass``, ``cut``, ``short``, or the status the proxy answered itself (``"503"``)."""


Rule = Callable[[Seen], str]


def pass_all(seen: Seen) -> str:
    return "pass"


def seeded_cuts(rate: float, seed: int = 0) -> Rule:
    """Cut about ``rate`` of all answers, chosen by a hash of (seed, request, repeat): deterministic."""

    def rule(seen: Seen) -> str:
        where = seen.path.lstrip("/").partition("/")[2] or seen.path.partition("?")[2]  # bucket left out
        digest = hashlib.sha256(f"{seed}|{seen.method}|{where}|{seen.range}|{seen.repeat}".encode())
        return "cut" if int.from_bytes(digest.digest()[:8], "big") < rate * 2**64 else "pass"

    return rule


def cut_first_tries(seen: Seen) -> str:
    """Cut the first try of every request (listings and ranged GETs); let the retries through."""
    return "cut" if seen.repeat == 0 else "pass"


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 that relays to ``upstream`` and applies ``rule`` to every request.

    ``log`` records every request with the action taken; ``rule`` may be
    swapped between runs. ``drop_headers`` are removed before forwarding
    (``{"If-Match"}`` makes a store that ignores conditional requests). Use
    as a context manager, or call start/stop.
    """

    def __init__(
        self, upstream: str, rule: Rule = pass_all, drop_headers: frozenset[str] = frozenset()
    ) -> None:
        parts = urlsplit(upstream)
        self.drop_headers = {name.lower() for name in drop_headers}
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rule = rule
        self.log: list[Seen] = []
        self._counts: Counter[tuple[str, str, str | None]] = Counter()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self, rule: Rule = pass_all) -> None:
        """Forget the requests seen (so the next ones count as first tries) and apply ``rule`` from now on."""
        with self._lock:
            self.log.clear()
            self._counts.clear()
            self.rule = rule

    def actions(self, method: str | None = None) -> Counter[str]:
        """How many requests (of ``method``, or all) got each action."""
        with self._lock:
            return Counter(s.action for s in self.log if method is None or s.method == method)

    def decide(self, method: str, path: str, range_: str | None) -> Seen:
        with self._lock:
            key = (method, path, range_)
            seen = Seen(method, path, range_, self._counts[key])
            self._counts[key] += 1
            seen = replace(seen, action=self.rule(seen))
            self.log.append(seen)
            return seen


def _handler_for(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as S3 does, so a cut really drops a pooled connection

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per request would drown the test output

        def _relay(self) -> None:
            if self.headers.get("Transfer-Encoding"):
                raise NotImplementedError("the fault proxy relays Content-Length requests only")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen = proxy.decide(self.command, self.path, self.headers.get("Range"))
            if seen.action.isdigit():
                self._answer_error(int(seen.action))
                return
            status, headers, data = self._forward(body)
            if seen.action == "short":
                data = data[: len(data) // 2]
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command == "HEAD":
                return
            if seen.action == "cut":
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self.close_connection = True  # the socket closes with the body half sent
                return
            self.wfile.write(data)

        def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
            conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in proxy.drop_headers}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                response = conn.getresponse()
                data = response.read()
                kept = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP]
                return response.status, kept, data
            finally:
                conn.close()

        def _answer_error(self, status: int) -> None:
            code = _ERROR_CODES.get(status, str(status))
            data = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                "<Message>injected by the test proxy</Message></Error>"
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _relay

    return Handler
