"""A TCP proxy that delays every byte by half a round trip each way: a broker that is not on
loopback, for the benchmarks (``bench/kafka_latency.py``).

    python bench/delay_proxy.py LISTEN_PORT TARGET_PORT RTT_MS

It runs in a process of its own, so that its work is not counted in the CPU time of the
process measured. Bytes keep their order; each chunk read is written once its due time (the
time it was read plus ``RTT_MS / 2``) has come, so the delay adds latency, not a limit on
throughput (what a long link with room to spare does).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import deque


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds after it was read."""
    pending: deque[tuple[float, bytes]] = deque()
    arrived = asyncio.Event()
    done = False

    async def read() -> None:
        nonlocal done
        try:
            while chunk := await reader.read(1 << 16):
                pending.append((time.monotonic() + delay, chunk))
                arrived.set()
        finally:
            done = True
            arrived.set()

    async def write() -> None:
        while True:
            while not pending:
                if done:
                    writer.close()
                    return
                arrived.clear()
                await arrived.wait()
            due, chunk = pending.popleft()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            if not pending:
                await writer.drain()

    await asyncio.gather(read(), write(), return_exceptions=True)


async def serve(listen: int, target: int, rtt_ms: float) -> None:
    delay = rtt_ms / 2000  # one way

    async def connected(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            broker_reader, broker_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, broker_writer, delay), _pipe(broker_reader, client_writer, delay))

    server = await asyncio.start_server(connected, "127.0.0.1", listen)
    print("serving", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    listen_port, target_port, rtt = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    asyncio.run(serve(listen_port, target_port, rtt))
