"""A real OpenAI-compatible ``/v1/chat/completions`` server on loopback (standard library), for the model policies'
tests: its model calls the calculator with ``6 * 7``, then answers what the tool said. It counts requests in flight,
and can be slow or answer garbage."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ChatServer:
    def __init__(self, delay: float = 0.0, garbage: str | None = None) -> None:
        self.requests: list[dict] = []
        self.in_flight = self.max_in_flight = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    outer.requests.append({"path": self.path, **body})
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    time.sleep(delay)
                finally:
                    # Out of flight before the reply is written: once the client reads it, its next request may
                    # arrive before this handler's thread runs again (counted 5 in flight for 4 under load).
                    with lock:
                        outer.in_flight -= 1
                self._answer(body)

            def _answer(self, body: dict) -> None:
                last = body["messages"][-1]["content"]
                if "<tool_response>" in last:  # answer what the calculator said; the stop string is stripped
                    content = "<answer>" + last.split("<tool_response>\n")[1].split("\n</tool_response>")[0]
                else:
                    content = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6 * 7"}}\n'
                reply = (
                    garbage
                    or json.dumps(
                        {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}
                    )
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
