"""/metrics on METRICS_PORT and /healthz, /readyz on HEALTH_PROBE_PORT: two small threaded HTTP servers on daemon
threads, as Karpenter serves them from controller-runtime's manager. A probe answers 200 "ok", or 500 with a one-line
reason; a probe callable that raises is a failing probe, never a crashed server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.exposition import choose_encoder

from controller.metrics import REGISTRY

Route = Callable[[BaseHTTPRequestHandler], tuple[int, str, bytes]]
TEXT = "text/plain; charset=utf-8"


def _metrics(request: BaseHTTPRequestHandler) -> tuple[int, str, bytes]:
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return 200, content_type, encoder(REGISTRY)


def _probe(check: Callable[[], bool], what: str) -> Route:
    def route(_request: BaseHTTPRequestHandler) -> tuple[int, str, bytes]:
        try:
            ok = bool(check())
        except Exception as e:  # a probe that raises fails, with the reason on one line
            reason = " ".join(f"{type(e).__name__}: {e}".split())[:200]
            return 500, TEXT, f"{what} check failed: {reason}\n".encode()
        if ok:
            return 200, TEXT, b"ok\n"
        return 500, TEXT, f"{what} check failed: {'not ready' if what == 'readyz' else 'not healthy'}\n".encode()

    return route


def _handler(routes: dict[str, Route]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body_too: bool) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                status, ctype, body = 404, TEXT, b"404 page not found\n"
            else:
                try:
                    status, ctype, body = route(self)
                except Exception as e:  # never a stack trace on a probe's stderr
                    status, ctype, body = 500, TEXT, " ".join(str(e).split())[:200].encode() + b"\n"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body_too:
                self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer(True)

        def do_HEAD(self) -> None:
            self._answer(False)

        def log_message(self, format: str, *args: object) -> None:
            return  # probes every few seconds would drown the controller's own logs

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


@dataclass
class Servers:
    """The running servers; `metrics_port` and `health_port` are the bound ports (useful with port 0)."""

    metrics_port: int
    health_port: int
    host: str
    _servers: list[ThreadingHTTPServer] = field(default_factory=list, repr=False)
    _threads: list[threading.Thread] = field(default_factory=list, repr=False)

    def stop(self) -> None:
        """Stop serving and close the sockets (idempotent)."""
        servers, self._servers = self._servers, []
        for server in servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(5)
        self._threads = []


def serve(metrics_port: int, health_port: int, ready: Callable[[], bool],
          healthy: Callable[[], bool] = lambda: True, host: str = "0.0.0.0") -> Servers:
    """Start :metrics_port/metrics and :health_port/healthz, /readyz on daemon threads (port 0: a free port; the same
    non-zero port for both: one server with all three paths). OSError when a port cannot be bound."""
    metrics_routes: dict[str, Route] = {"/metrics": _metrics}
    health_routes: dict[str, Route] = {"/healthz": _probe(healthy, "healthz"), "/readyz": _probe(ready, "readyz")}
    if metrics_port and metrics_port == health_port:
        plan = [(metrics_port, {**metrics_routes, **health_routes})]
    else:
        plan = [(metrics_port, metrics_routes), (health_port, health_routes)]
    servers: list[ThreadingHTTPServer] = []
    try:
        for port, routes in plan:
            servers.append(_Server((host, port), _handler(routes)))
    except OSError:
        for server in servers:
            server.server_close()
        raise
    threads = []
    for server in servers:
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                  name=f"http-{server.server_address[1]}", daemon=True)
        thread.start()
        threads.append(thread)
    ports = [int(s.server_address[1]) for s in servers]
    return Servers(metrics_port=ports[0], health_port=ports[-1], host=host, _servers=servers, _threads=threads)
