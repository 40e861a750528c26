"""The embedded store's files are its user's alone by default (0600, directories 0700),
whatever the umask; ``file_mode`` (``StreamProvider.embedded(file_mode=)``, ``[provider]
file_mode``) relaxes them, e.g. to let a group read the events."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from spark_sink.schema import HandoffSchema
from streams import StreamId, StreamProvider
from streams.backends.embedded.handoff_log import HandoffLog, HandoffWriter
from streams.core.errors import ConfigurationError
from streams.runtime.config import load_config


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes(root: Path) -> dict[str, int]:
    """Every path under ``root`` (itself as ``.``) and its permission bits."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.stat().st_mode)
    return found


def fill(provider: StreamProvider, store: Path) -> None:
    """Events on the queues (the database, its WAL and shared memory, the write turns) and a
    handoff segment file (its stream and partition directories)."""

    async def publish() -> None:
        async with provider.client() as client:
            await client.get_stream(StreamId("sensors", "s1")).on_next({"t": 1.0})

    anyio.run(publish)
    log = HandoffLog(provider.backend.store, inline_bytes=0)  # type: ignore[attr-defined]
    writer = HandoffWriter(log, "counts", HandoffSchema.windows({"count": "bigint"}))
    with log.store.transaction() as conn:
        writer.append(conn, 0, [(0.0, 60.0, "a", 3)])


@pytest.mark.parametrize(("file_mode", "expected_dir"), [(None, 0o700), (0o640, 0o750)])
def test_the_store_makes_its_files_and_directories_with_their_modes_whatever_the_umask(
    tmp_path, file_mode, expected_dir
):
    store = tmp_path / "a" / "store"
    with umask(0o002):  # a umask that would leave everything group-writable
        given = {} if file_mode is None else {"file_mode": file_mode}
        fill(StreamProvider.embedded(store, queues=2, **given), store)
    found = modes(store)
    expected_file = file_mode or 0o600
    assert {"headrace.db", "headrace.db-wal", "headrace.db-shm", "headrace.db-turns"} <= set(found)
    assert any(name.endswith(".arrow") for name in found), found  # the segment file
    wrong = {
        name: oct(mode)
        for name, mode in found.items()
        if mode != (expected_dir if (store / name).is_dir() else expected_file)
    }
    assert wrong == {}
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == expected_dir  # a parent it made


def test_the_configuration_sets_the_mode_and_refuses_a_mode_that_locks_the_owner_out(tmp_path):
    environ = {"HEADRACE_PROVIDER__PATH": str(tmp_path / "store")}
    config = load_config(environ={**environ, "HEADRACE_PROVIDER__FILE_MODE": '"0640"'})
    assert config.provider_settings.file_mode == 0o640
    provider = config.provider()
    assert provider.backend.store.file_mode == 0o640  # type: ignore[attr-defined]
    assert (
        load_config(environ={**environ, "HEADRACE_PROVIDER__FILE_MODE": "0o644"}).provider_settings.file_mode == 0o644
    )
    with pytest.raises(ConfigurationError) as refused:
        load_config(environ={**environ, "HEADRACE_PROVIDER__FILE_MODE": '"0400"'})
    assert str(refused.value) == (
        'HEADRACE_PROVIDER__FILE_MODE: must be a file mode with read and write for the owner, e.g. "0600" '
        "(the default) or \"0640\" (the group may read too), not '0400'"
    )
    with pytest.raises(ConfigurationError, match="file_mode is read and write for the owner"):
        StreamProvider.embedded(tmp_path / "other", file_mode=0o777)
