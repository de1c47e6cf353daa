"""Shared pieces of the client tests: model configs, a transport that counts requests, a
proxy that loses answers."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from committee_client import Retry

MAX_BODY = 64 * 1024
FUSION = {
    "labels": ["cat", "dog", "bird"],
    "experts": {"expert_names": ["cnn", "svm", "knn"], "normalize": "sum-to-one"},
    "learner": {"kind": "committee", "alpha": 1.5},
}
SPARSE = {
    "labels": [1, -1],
    "attributes": {"n_features": 1000},
    "learner": {"kind": "balanced-winnow", "alpha": 1.2},
}
FAST = Retry(attempts=3, backoff=0.01, max_delay=0.05, jitter=0)


class Counting(httpx.HTTPTransport):
    """The real transport, counting the requests it sends (to see retries)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return super().handle_request(request)


class LossyProxy:
    """An HTTP proxy on loopback that forwards each request to the service and, for the
    first ``drop`` of them, hangs up instead of passing the answer back: the request was
    applied, the client never hears so."""

    def __init__(self, upstream: str, drop: int = 1) -> None:
        self.upstream = httpx.Client(base_url=upstream, timeout=30)
        self.drop = drop
        self.forwarded = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def forward(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n else None
                headers = {"content-type": self.headers.get("content-type", "")}
                if "idempotency-key" in self.headers:
                    headers["idempotency-key"] = self.headers["idempotency-key"]
                r = proxy.upstream.request(self.command, self.path, content=body, headers=headers)
                proxy.forwarded += 1
                if proxy.drop > 0:
                    proxy.drop -= 1
                    self.close_connection = True
                    return
                self.send_response(r.status_code)
                for key in ("content-type", "retry-after"):
                    if key in r.headers:
                        self.send_header(key, r.headers[key])
                self.send_header("content-length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            do_GET = do_POST = do_PUT = do_DELETE = forward

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LossyProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.upstream.close()
