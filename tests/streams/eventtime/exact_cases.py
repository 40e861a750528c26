"""Sub-second cases on window edges, and their exact references (integer milliseconds), shared
by the core's tests, ``headrace simulate``'s, a worker's and Spark's: every time and duration
is exact (docs/event-time.md, "Exact time"), so each window agrees to the millisecond."""

from __future__ import annotations

# Millisecond timestamps on and beside the edges of 100 ms, 250 ms and 1.5 s windows
# (0.3 s is where 0.3 // 0.1 == 2.0 in floats), in order.
EDGE_MS = sorted(
    {0, 1, 99, 100, 101, 250, 299, 300, 301, 499, 500, 700, 999, 1000, 1001, 1250, 1499, 1500, 1501}
    | {2300, 2999, 3000, 3001, 4499, 4500, 4501, 5999, 6000}
    | set(range(0, 6000, 70))
)

# (size, hop) in milliseconds, and how Spark SQL's window() names them.
WINDOWS_MS = [
    (100, 100, "100 milliseconds", None),
    (250, 250, "250 milliseconds", None),
    (1500, 1500, "1500 milliseconds", None),
    (300, 100, "300 milliseconds", "100 milliseconds"),
    (1500, 250, "1500 milliseconds", "250 milliseconds"),
    (250, 100, "250 milliseconds", "100 milliseconds"),
]


def windows_reference(times_ms: list[int], size: int, hop: int) -> list[tuple[int, int, int]]:
    """``(start, end, count)`` of every window ``[j*hop, j*hop + size)`` holding an event,
    by brute force over integer milliseconds (Spark's ``window()``), in order of start."""
    counts: dict[int, int] = {}
    for t in times_ms:
        for j in range((t - size) // hop, t // hop + 1):
            if j * hop <= t < j * hop + size:
                counts[j * hop] = counts.get(j * hop, 0) + 1
    return [(start, start + size, n) for start, n in sorted(counts.items())]


def sliding_reference(times_us: list[int], span_us: int) -> list[tuple[int, int, int]]:
    """``(start, end, count)`` of Kafka Streams' sliding windows (KIP-450) over integer
    microseconds, by brute force: each event's left window ``[t - span, t]`` and, when an
    event falls in it, its right window ``[t + 1, t + 1 + span]`` (both bounds included),
    each window once, sorted."""
    names = {(t - span_us, t) for t in times_us}
    names |= {(t + 1, t + 1 + span_us) for t in times_us if any(t + 1 <= u <= t + 1 + span_us for u in times_us)}
    return sorted((s, e, sum(1 for u in times_us if s <= u <= e)) for s, e in names)
