"""A writer in its own process that commits in a tight loop, as a steady producer does:
``python -m tests.streams.embedded.hot_writer PATH SECONDS``. Prints ``writing`` once started and the
number of commits when done."""

from __future__ import annotations

import sys
import time

from streams.backends.embedded.store import EmbeddedStore


def main(path: str, seconds: float) -> None:
    store = EmbeddedStore(path, busy_timeout=0.2)
    store.require_schema("hot", ["CREATE TABLE hot_rows(n INTEGER)"])
    commits = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with store.transaction() as conn:
            conn.executemany("INSERT INTO hot_rows VALUES (?)", [(commits,)] * 2000)
        commits += 1
        if commits == 1:
            print("writing", flush=True)
    print(commits, flush=True)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
