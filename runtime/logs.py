"""Log setup shared by every kubus command: plain text, or one JSON object a line.

Every line goes through runtime.redact: a URL with a password or token in a message or a traceback is
printed without it, whoever logged it (kubus, nats-py, asyncpg, the kubernetes client)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from runtime import redact


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact.text(record.getMessage()),
        }
        if record.exc_info:
            entry["error"] = redact.text(self.formatException(record.exc_info))
        return json.dumps(entry)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact.text(super().format(record))


def configure(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add("--log-format", default="text", choices=["text", "json"])
