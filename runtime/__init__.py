"""What every kubus service shares, below them all: nothing here imports a service or the CLI.

    bus.py          the NATS connection and kubus's JetStream streams; publishing that survives a reconnect
    natsserver.py   an embedded nats-server with JetStream, for a fresh machine
    serving.py      /metrics, /healthz, /readyz and the metrics every service reports
    logs.py         log setup: plain text or JSON lines
    failpoints.py   crash at a named point, for the crash-recovery tests
"""
