"""A loopback Bedrock stand-in for the boto3 gate's tests: each request is answered by the
next scripted answer, a list of steps sent in order as HTTP/1.1 chunks: bytes (one chunk
each), a `Wait` (the server pauses until the test sets its event, or the wait runs out,
and notes which), or `BREAK` (the connection is closed without the last chunk). Every
request's path and body are kept."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from lockgate.eventstream import MEDIA_TYPE

__all__ = ["BREAK", "Answer", "Received", "Server", "Wait", "serving"]


@dataclass
class Wait:
    """A pause in an answer until `event` is set (by the test), at most `seconds`."""

    event: threading.Event = field(default_factory=threading.Event)
    seconds: float = 5.0
    released: bool | None = None  # after the pause: whether the event was set in time


BREAK = object()  # the connection closed mid-body


@dataclass(frozen=True)
class Answer:
    steps: Sequence[bytes | Wait | object]
    status: int = 200
    content_type: str = MEDIA_TYPE
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Received:
    path: str
    body: bytes


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, answers: Sequence[Answer]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers = list(answers)
        self.received: list[Received] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        self.server.received.append(Received(self.path, body))
        if not self.server.answers:
            self.send_error(500, "no answer scripted")
            return
        answer = self.server.answers.pop(0)
        self.send_response(answer.status)
        self.send_header("content-type", answer.content_type)
        self.send_header("transfer-encoding", "chunked")
        self.send_header("x-amzn-requestid", "lockgate-test")
        for name, value in answer.headers:
            self.send_header(name, value)
        self.end_headers()
        for step in answer.steps:
            if isinstance(step, Wait):
                step.released = step.event.wait(step.seconds)
            elif step is BREAK:
                self.wfile.flush()
                self.close_connection = True
                return
            elif isinstance(step, bytes) and step:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(step), step))
                self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


@contextmanager
def serving(*answers: Answer) -> Iterator[Server]:
    server = Server(answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
