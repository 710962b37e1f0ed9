"""A small blocking client for the control plane's own checks: JSON over HTTPS with a client certificate.

The control plane waits on conditions with it (etcd healthy, kube-apiserver ready, the nodes Ready) and creates
its nodes. It is not kubus' client (that is the official one, from the kubeconfig: runtime/kubeconfig.py).
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class ApiError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Api:
    def __init__(self, server: str, ca: Path | None = None, cert: Path | None = None, key: Path | None = None,
                 timeout: float = 10.0) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
        self._context: ssl.SSLContext | None = None
        if server.startswith("https:"):
            self._context = ssl.create_default_context(cafile=str(ca) if ca else None)
            if cert and key:
                self._context.load_cert_chain(str(cert), str(key))

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        """The decoded JSON (or text) answer; ApiError with the status for an HTTP error, OSError if unreachable."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._context) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            with contextlib.suppress(ValueError, AttributeError):
                detail = json.loads(detail).get("message", detail)
            raise ApiError(exc.code, f"{method} {path}: {exc.code} {detail.strip()[:300]}") from None
        text = raw.decode()
        try:
            return json.loads(text)
        except ValueError:
            return text

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)


def wait_for(condition: Callable[[], T | None], timeout: float, what: str,
             check: Callable[[], None] | None = None, interval: float = 0.2) -> T:
    """Poll ``condition`` until it returns something other than None (or False), or fail after ``timeout`` seconds
    saying what was awaited and the last error seen; ``check`` runs before each poll and raises to give up early
    (a process that died)."""
    deadline = time.monotonic() + timeout
    last: str = "no answer yet"
    while True:
        if check is not None:
            check()
        try:
            result = condition()
            if result is not None and result is not False:
                return result
            last = "not yet"
        except (OSError, ApiError, ValueError, KeyError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last})")
        time.sleep(interval)
