"""What every kubus service shares, below them all: nothing here imports a service or the CLI.

    bus.py          the NATS connection and kubus's JetStream streams; publishing that survives a reconnect
    natsserver.py   an embedded nats-server with JetStream, for a fresh machine
    serving.py      /metrics, /healthz, /readyz and the metrics every service reports
    metrics.py      the process's one prometheus registry, metric maps, client-go's rest_client metrics
    running.py      run_service: the one way a service starts (bus, serving, signals, parts, exit code)
    kubeconfig.py   the one kubeconfig loader (--kubeconfig, --context, KUBECONFIG, ~/.kube/config, in-cluster)
    flags.py        the flags the commands share, each declared once and read from the environment too
    logs.py         log setup: plain text or JSON lines (with an object's fields), every line redacted
    redact.py       URLs without their passwords and tokens, for every message kubus prints
    failpoints.py   crash or pause at a named point, for the crash-recovery tests
    printing.py     the CLI's one table renderer (120 columns, -o wide) and its -o json|yaml
    progress.py     progress on stderr when it is a terminal (tqdm), for the long commands
    exitcodes.py    one meaning per exit code, for every command
    cancellation.py asyncio.wait_for that never loses a cancellation (Python 3.11's does), installed here
"""

from runtime import cancellation

cancellation.install()  # before any service code awaits a NATS reply
