"""Credentials out of everything kubus prints: URLs in messages, log lines, `kubus status`.

A NATS URL may carry `user:password@` or a token (`nats://TOKEN@host`), a PostgreSQL URL `user:password@`
or `?password=`: shown to a user, in a log shipped to a central store, in a bug report, they are a leak.
`url()` redacts one URL (or a comma-separated list of seeds) that kubus was given; `text()` redacts any URL
found in free text (an exception's message, a log line), which is what the log formatters apply to every
line, so that a message nobody thought about is covered too. The password (or token) becomes `***`; the
user name of a URL with a password stays, since it says which identity failed.
"""

from __future__ import annotations

import re

MASK = "***"

# userinfo with a password: scheme://user:password@ (the password may hold anything but whitespace and '@',
# and a password that itself holds '@' is redacted up to the last '@' before the host)
_WITH_PASSWORD = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^\s/@:,]*):(?P<secret>[^\s,]*)@"
                            r"(?=[^\s@,]*(?:[\s,]|$))")
# userinfo that is a bare token: NATS takes nats://TOKEN@host (and tls://, ws://, wss://)
_TOKEN = re.compile(r"(?P<scheme>\b(?:nats|tls|ws|wss)://)(?P<secret>[^\s/@:,]+)@")
# query parameters that hold secrets (libpq's password=, sslpassword=; a token=)
_SECRET_PARAM = re.compile(r"(?P<key>[?&](?:[a-z_]*password|token|secret)=)(?P<secret>[^&\s#]*)", re.IGNORECASE)


def text(value: str) -> str:
    """`value` with the credentials of every URL in it replaced by ***."""
    if "@" in value:
        value = _WITH_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", value)
        value = _TOKEN.sub(lambda m: f"{m['scheme']}{MASK}@", value)
    if "=" in value:
        value = _SECRET_PARAM.sub(lambda m: f"{m['key']}{MASK}", value)
    return value


def url(value: str) -> str:
    """A URL (or a comma-separated list of seeds) as it may be shown: without its password or token."""
    return text(value)
