"""A local Spark Connect server started from the pyspark wheel, as a user starts one with
``sbin/start-connect-server.sh``: the wheel is a Spark home (``bin/spark-submit``, the
connect jar in ``jars/``). It runs in the foreground of its own process group, so stopping it
stops its JVM and the Python workers it started."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyspark

from tests.spark_sink.handoff_testkit import QUICK_JVMS

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


@dataclass
class ConnectServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        """Stop the JVM and what it started (its process group); killed if it lingers."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def start_connect_server(workdir: Path, timeout: float = 300) -> ConnectServer:
    """A Spark Connect server on a free loopback port (``local[2]``, a 512 MiB driver, beside
    the suite's own session), with ``workdir`` for its warehouse and log; returns once it
    listens. Its Python workers (the DataSource's planning and reads) run this interpreter,
    which has headrace."""
    home = Path(pyspark.__file__).parent
    port = free_port()
    conf = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.pyspark.python": sys.executable,
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        **QUICK_JVMS,
    }
    command = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", "local[2]"]
    command += ["--driver-memory", "512m", "--name", "headrace-connect-tests"]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    log = workdir / "connect-server.log"
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = ConnectServer(f"sc://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + timeout
    while not listening(port):
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the Spark Connect server did not start (exit {process.returncode}):\n{tail}")
        time.sleep(0.2)
    return server
