"""A local HTTP server playing webhook destinations: it records every POST and answers as told.

``WebhookServer()`` listens on 127.0.0.1 on a free port in a thread; ``url(path)`` is a
destination's URL; ``answer(path, 500, 500)`` queues statuses for that path (200 once
they run out); ``requests`` lists what arrived, in order.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Request:
    """One POST as received."""

    path: str
    key: str | None
    content_type: str | None
    body: bytes
    received: float  # time.time()


class WebhookServer:
    """Records POSTs; answers each path with queued statuses, then 200."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.requests: list[Request] = []
        self.delay_s = delay_s
        self._answers: dict[str, deque[int]] = defaultdict(deque)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received = time.time()
                with server._lock:
                    queued = server._answers[self.path]
                    status = queued.popleft() if queued else 200
                    server.requests.append(
                        Request(self.path, self.headers.get("Idempotency-Key"),
                                self.headers.get("Content-Type"), body, received)
                    )  # fmt: skip
                if server.delay_s:
                    time.sleep(server.delay_s)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client was killed while it waited

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def answer(self, path: str, *statuses: int) -> None:
        with self._lock:
            self._answers[path].extend(statuses)

    def to(self, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
