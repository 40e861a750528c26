"""A misspelt option of the headrace DataSource names the one it is closest to."""

from __future__ import annotations

import pytest

from spark_sink.options import ReadOptions
from streams.core.errors import ConfigurationError


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("maxRecordPerTrigger", " (did you mean 'maxRecordsPerTrigger'?)"),
        ("startingoffset", " (did you mean 'startingOffsets'?)"),
        ("colour", ""),
    ],
)
def test_an_unknown_option_says_which_one_was_meant(name, hint):
    with pytest.raises(ConfigurationError) as caught:
        ReadOptions.parse({"path": "/p", "stream": "s", name: "1"})
    assert str(caught.value).startswith(f"unknown headrace option(s) {name}{hint}; the options are: path or ")
