"""Workers need neither Spark nor matplotlib: they are extras (``headrace[spark]``,
``headrace[plot]``), loaded only where used, and their absence is one clear line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "tests" / "streams" / "eventtime" / "data" / "asa_ordering_policy.csv"

# Runs the rest of the script as if the named top-level packages were not installed.
WITHOUT = """
import sys
class _Missing:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {blocked!r}:
            raise ImportError(f"No module named {{name!r}}")
        return None
sys.meta_path.insert(0, _Missing())
"""


def run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_declaring_a_handoff_loads_no_spark():
    done = run(
        "import sys\nfrom spark_sink import Handoff, EventHandoff\n"
        "Handoff('t', {'n': 'bigint'})\nprint('pyspark' in sys.modules, 'matplotlib' in sys.modules)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_a_worker_declaring_a_handoff_runs_without_pyspark_installed(tmp_path):
    done = run(
        WITHOUT.format(blocked={"pyspark"})
        + f"""
import anyio
from spark_sink import Handoff
from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
provider = StreamProvider.embedded({str(tmp_path)!r}, queues=1)
seen = []
@provider.implicit("m")
class Counts:
    event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count())
    handoff = Handoff("counts", {{"count": "bigint"}})
    def __init__(self, sid): pass
    def on_window(self, w): seen.append(w.value)
async def main():
    async with provider:
        s = provider.get_stream(StreamId("m", "a"))
        await s.on_next_batch([{{"t": 1.0}}, {{"t": 2.0}}, {{"t": 15.0}}])
        await provider.drain()
anyio.run(main)
print(seen)
"""
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[2]"


def test_simulate_plot_without_matplotlib_says_what_to_install(tmp_path):
    done = run(
        WITHOUT.format(blocked={"matplotlib"})
        + f"from streams.cli import main\nraise SystemExit(main(['simulate', '--plot', {str(tmp_path / 'p.png')!r}, {str(SAMPLE)!r}]))"
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "headrace simulate: error: --plot needs matplotlib: pip install 'headrace[plot]'"
    ]
