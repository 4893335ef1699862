"""A TCP proxy on loopback in front of PostgreSQL that can stall: stop forwarding, both ways, closing nothing.

That is what a network path that black-holes traffic looks like from the
client (a NAT or a firewall that lost its state, a proxy that froze, a
server whose host froze): the client's connection stays open, what it sends
is acknowledged by the proxy's kernel (until its buffers fill), and no answer
ever comes. No server-side timer can help, and TCP keepalives and libpq's
``tcp_user_timeout`` cannot notice, since nothing stops acknowledging.
New connections made while it stalls are accepted and stall too.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from types import TracebackType

import sqlalchemy as sa

__all__ = ["StallingProxy"]


class StallingProxy:
    """Forwards ``127.0.0.1:<port>`` to ``upstream`` until :meth:`stall`, again after :meth:`resume`."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.connections = 0
        threading.Thread(target=self._accept, name="stall-proxy", daemon=True).start()

    @classmethod
    def before(cls, url: str) -> tuple[StallingProxy, str]:
        """A proxy in front of the server of ``url``, and ``url`` pointed through it."""
        parsed = sa.make_url(url)
        proxy = cls((parsed.host or "127.0.0.1", parsed.port or 5432))
        through = parsed.set(host="127.0.0.1", port=proxy.port)
        return proxy, through.render_as_string(hide_password=False)

    def stall(self) -> None:
        """Stop forwarding on every connection, old and new, without closing any."""
        self._flowing.clear()

    def resume(self) -> None:
        """Forward again: what was held goes through."""
        self._flowing.set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        with self._lock:
            for sock in [self._listener, *self._sockets]:
                with contextlib.suppress(OSError):
                    sock.close()

    def __enter__(self) -> StallingProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._sockets += [client, server]
                self.connections += 1
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._closed.is_set():
                if not self._flowing.is_set():
                    time.sleep(0.01)  # read nothing, send nothing: the kernel holds (and acknowledges) it
                    continue
                ready, _, _ = select.select([src], [], [], 0.05)
                if not ready or not self._flowing.is_set():
                    continue
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
