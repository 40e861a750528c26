"""The README's quickstart runs as written and prints what the README says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
GUIDE = README.parent / "docs" / "guide.md"


def test_quickstart_runs_as_written(tmp_path):
    text = README.read_text()
    code = re.search(r"## Quickstart\n+```python\n(.*?)```", text, re.S).group(1)
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=README.parent,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "average of 1: 21.50",
        "average of 3: 22.00",
        "[21.5, 22.0, 22.5] ['0:0', '1:0', '1:1']",
    ]


def test_the_kafka_json_path_runs_as_written(kafka_broker, kafka_topic, tmp_path):
    """The "I already have a Kafka topic of JSON events" example, on the test broker, over
    a topic a plain aiokafka producer wrote: it prints exactly the windows it closed."""
    import anyio

    from tests.kafka_fixtures import create_topic
    from tests.sensor_workload import closed_window_counts, readings, write_json

    text = README.read_text()
    code = re.search(r"### I already have a Kafka topic of JSON events\n.*?```python\n(.*?)```", text, re.S).group(1)
    assert code.count('"localhost:9092",') == code.count('"sensor-readings",') == 1
    assert code.count('group_id="sensor-counts",') == 1
    script = tmp_path / "kafka_json.py"
    # The test broker (Tansu) has no idempotent producer; real brokers have, and the README
    # keeps Kafka's default.
    code = code.replace('"localhost:9092",', f'"{kafka_broker}",').replace('"sensor-readings",', f'"{kafka_topic}",')
    code = code.replace('group_id="sensor-counts",', 'group_id="sensor-counts", kafka={"idempotent": False},')
    script.write_text(code)
    items = list(readings(3000, sensors=10, spacing=0.1))  # 300 s of readings

    async def write() -> None:
        await create_topic(kafka_broker, kafka_topic, 8)
        await write_json(kafka_broker, kafka_topic, items)

    anyio.run(write)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=README.parent
    )
    assert result.returncode == 0, result.stderr
    printed = sorted(tuple(line.split()) for line in result.stdout.splitlines())
    expected = closed_window_counts([v for _, v in items], window=60, out_of_order=5)
    assert printed == sorted((s, f"{start:.1f}", str(n)) for (s, start), n in expected.items())
    assert len(printed) >= 10


def test_the_testing_example_runs_with_the_guides_settings_and_no_warning(tmp_path):
    """*Testing your consumers* (docs/guide.md): its pytest file, in a project of its own with
    the settings the guide gives, passes with no warning (no loop-scope deprecation from
    pytest-asyncio)."""
    text = GUIDE.read_text()
    section = text[text.index("## Testing your consumers") :]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    settings = re.search(r"```toml\n(\[tool\.pytest\.ini_options\].*?)```", section, re.S).group(1)
    (tmp_path / "pyproject.toml").write_text(settings)
    (tmp_path / "test_tolls.py").write_text(example)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", "test_tolls.py"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith("1 passed in ") and "warning" not in result.stdout.lower()
