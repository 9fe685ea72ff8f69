"""A collector-less OTLP/HTTP trace receiver for tests: decodes what exporters post."""

from __future__ import annotations

import queue
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class Collector:
    """An OTLP/HTTP trace receiver: every export request, decoded, in a queue."""

    def __init__(self) -> None:
        self.requests: queue.Queue[tuple[str, ExportTraceServiceRequest]] = queue.Queue()
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                decoded = ExportTraceServiceRequest()
                decoded.ParseFromString(body)
                received.put((self.path, decoded))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
