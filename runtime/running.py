"""`run_service`: the one way a kubus service is started (`kubus ingest`, `reconcile`, `execute` and `up`).

    exit_code = run_service("reconcile", options, build)

It sets up logging and the event loop, starts an embedded nats-server when no NATS URL is given,
connects to NATS and ensures the streams, serves /metrics, /healthz and /readyz (refreshing the
streams' gauges), and then asks `build` for the service's parts: each part is a coroutine that runs as
a task until SIGINT or SIGTERM (then every part is cancelled, which is its clean stop), or until one
part ends on its own. A service's parts all get the same bus connection and the same health checks.
SIGUSR1 logs what every task waits on and where every thread is, and the service runs on.

Exit codes: 0 stopped when asked; 1 a part ended on its own or crashed (the other parts were stopped
cleanly first, so that a supervisor, systemd or the kubelet, restarts a whole process); 2 a dependency
was missing at start (NATS, the database, the embedded nats-server), a stream does not fit what kubus needs
(runtime/bus.py), the data directory cannot be created or another kubus runs on it (runtime/datadir.py), the
metrics port is taken, or a part refused its start-up input with a StartupError (a kubeconfig that cannot be
used, runtime/kubeconfig.py; ingest: the streams are another cluster's; the other parts are stopped cleanly first).
Either failure is one line on stderr: `kubus <command>: <what failed and how to fix it>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime import datadir, exitcodes, logs, redact, serving
from runtime.bus import NO_AUTH, Bus, NatsAuth, NatsUnavailable, StreamError, StreamSettings, connected
from runtime.natsserver import EmbeddedNats, NatsServerUnusable
from runtime.serving import Health

log = logging.getLogger("kubus")

# one meaning per exit code, for every kubus command (runtime/exitcodes.py)
EXIT_STOPPED, EXIT_FAILED, EXIT_STARTUP, EXIT_NO = exitcodes.DONE, exitcodes.FAILED, exitcodes.NOT_STARTED, exitcodes.NO


class StartupError(RuntimeError):
    """A dependency is missing or unreachable at start; the message says which and how to fix it."""


class ServiceFailed(RuntimeError):
    """A part of the service ended on its own (it crashed, or returned while it should run): the process
    stops the rest cleanly and exits non-zero, with this one line."""


@dataclass(frozen=True, kw_only=True)
class Options:
    """What run_service needs from the command line (runtime.flags declares the flags)."""

    nats_url: str | None  # None: an embedded nats-server keeping its data under data_dir
    nats_auth: NatsAuth = NO_AUTH  # the service's NATS identity (runtime.flags.nats_auth)
    data_dir: Path
    prefix: str
    partitions: int  # used only when the streams are first created
    streams: StreamSettings = field(default_factory=StreamSettings)  # the same: an existing stream keeps its own
    metrics_port: int  # 0: no /metrics, /healthz and /readyz
    metrics_host: str = "127.0.0.1"  # where they are served; "": every interface
    # --health-probe-bind-address: /healthz and /readyz on a server of their own, (host, 0) on none; None: beside
    # /metrics
    probes: tuple[str, int] | None = None
    instance: str
    log_level: str = "info"
    log_format: str = "text"


@dataclass(frozen=True)
class Runtime:
    """What a service's parts are built from."""

    bus: Bus  # connected, the streams created
    health: Health  # the checks /healthz and /readyz report: each part registers its own
    data_dir: Path  # created
    stack: contextlib.AsyncExitStack  # closes what the build opened, once every part has stopped


Part = Callable[[], Coroutine[Any, Any, None]]  # one of a service's tasks
Build = Callable[[Runtime], Awaitable[dict[str, Part]]]
Prepare = Callable[[Path], Awaitable[None]]  # readies the data directory before anything uses it


def run_service(command: str, options: Options, build: Build, prepare: Prepare | None = None) -> int:
    """Runs the service `build` makes until it is asked to stop or fails; returns the exit code. `prepare`, if
    given, is awaited with the data directory once this process holds it, before the embedded nats-server starts
    (`kubus up --sim`: runtime.datadir.set_aside)."""
    logs.configure(options.log_level, options.log_format)
    install_fast_loop()
    try:
        asyncio.run(_serve(command, options, build, prepare))
    except (NatsUnavailable, StreamError, StartupError) as exc:
        print(f"kubus {command}: {redact.text(str(exc))}", file=sys.stderr)  # a driver may quote a URL
        return EXIT_STARTUP
    except ServiceFailed as exc:
        print(f"kubus {command}: {redact.text(str(exc))}", file=sys.stderr)  # a driver may quote a URL
        return EXIT_FAILED
    return EXIT_STOPPED


def install_fast_loop() -> None:
    try:
        import uvloop
    except ImportError:  # the default loop works, only slower
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def _serve(command: str, options: Options, build: Build, prepare: Prepare | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)
    failures: list[str] = []
    startup: StartupError | None = None
    async with contextlib.AsyncExitStack() as stack:
        try:
            options.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # the store and streams: pod bodies
        except OSError as exc:
            raise StartupError(f"cannot create data directory {options.data_dir} ({exc.strerror}); give another "
                               "--data-dir (or KUBUS_DATA_DIR)") from None
        nats_url = options.nats_url
        if not nats_url:
            try:
                stack.enter_context(datadir.lock(options.data_dir))  # one embedded nats-server on a store
            except datadir.DataDirBusy as exc:
                raise StartupError(str(exc)) from None
        if prepare is not None:
            await prepare(options.data_dir)
        if not nats_url:
            embedded = EmbeddedNats(options.data_dir / datadir.NATS_DIR)
            try:
                nats_url = await embedded.start()
            except (FileNotFoundError, NatsServerUnusable) as exc:  # no embedded extra installed (the image), or
                raise StartupError(str(exc)) from None  # an older nats-server on PATH: say so, not a traceback
            except (RuntimeError, TimeoutError) as exc:  # it exited, or never said it was ready
                raise StartupError(f"the embedded nats-server in {options.data_dir / datadir.NATS_DIR} did not "
                                   f"start: {_reason(exc)}; see {embedded.log_path}, or pass --nats-url") from None
            stack.push_async_callback(embedded.stop)
            log.info("embedded nats-server with JetStream at %s", nats_url)
        bus = await stack.enter_async_context(connected(
            nats_url, f"kubus-{command}-{options.instance}", prefix=options.prefix, partitions=options.partitions,
            settings=options.streams, auth=options.nats_auth))
        health = Health()
        # (host, port, /metrics, probes): one server for both unless --health-probe-bind-address separates them
        servers = [(options.metrics_host, options.metrics_port, True, options.probes is None)]
        if options.probes is not None:
            servers.append((*options.probes, False, True))
        for host, port, metrics_too, probes_too in servers:
            if not port:
                continue
            where = f"{_bracketed(host)}:{port}"
            try:
                runner = await serving.serve(health, host, port, metrics_too=metrics_too, probes_too=probes_too)
            except OSError as exc:  # the port is taken, or not ours to bind: a start-up error, not a traceback
                why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
                choose = ("--metrics-bind-address HOST:PORT or --metrics-port PORT, env KUBUS_METRICS_BIND_ADDRESS or "
                          "KUBUS_METRICS_PORT" if metrics_too else
                          "--health-probe-bind-address HOST:PORT, env KUBUS_HEALTH_PROBE_BIND_ADDRESS")
                raise StartupError(f"cannot serve {serving.served(metrics_too, probes_too)} on {where}: {why} "
                                   f"(choose another with {choose}; 0 serves none)") from None
            stack.push_async_callback(runner.cleanup)
        if options.metrics_port:
            gauges = asyncio.create_task(serving.watch_streams(bus), name="stream-gauges")
            stack.push_async_callback(_cancel, gauges)
        parts = await build(Runtime(bus, health, options.data_dir, stack))
        tasks = [asyncio.create_task(part(), name=name) for name, part in parts.items()]
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        # a part that ended before we were asked to stop failed, whatever it returned
        ended = [task for task in tasks if task.done()] if not stop.is_set() else []
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for task, result in zip(tasks, results, strict=True):
            if isinstance(result, StartupError):  # a part found its start-up input wrong (ingest: another cluster)
                startup = startup or result
            elif isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                failures.append(f"{task.get_name()} stopped: {_reason(result)}")
                log.debug("%s stopped", task.get_name(), exc_info=result)
            elif task in ended:
                failures.append(f"{task.get_name()} ended on its own")
        for failure in failures:
            log.error("%s", failure)
        stopper.cancel()
        log.info("stopped")
    if startup is not None:
        raise startup
    if failures:
        raise ServiceFailed("; ".join(failures))


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _reason(exc: BaseException) -> str:
    """One line: the message, with the exception's type where the message alone does not say what failed."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _dump_tasks() -> None:
    """`kill -USR1 <pid>`: what every task of the service is waiting on, and where every thread is (a database
    driver's worker blocked on a lock, a thread the process's exit would wait for), in its log (a stuck service)."""
    out = io.StringIO()
    for task in asyncio.all_tasks():
        out.write(f"--- {task.get_name()}\n")
        task.print_stack(limit=12, file=out)
    names = {thread.ident: thread for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        thread = names.get(ident)
        what = f"{thread.name}{'' if thread.daemon else ' (non-daemon)'}" if thread is not None else str(ident)
        out.write(f"--- thread {what}\n")
        out.write("".join(traceback.format_stack(frame, limit=8)))
    log.warning("asyncio tasks:\n%s", out.getvalue())
