"""Structured logs: every line says which worker, queue and stream it is about.

A :class:`LogContextFilter` on the handler gives each record three attributes, ``worker``,
``queue`` and ``stream``, the first of these that names them:

1. the record's own arguments: the runtime passes :class:`~streams.core.ids.QueueId` and
   :class:`~streams.core.ids.StreamId` objects to its log calls (``log.warning("%s: ...", queue)``),
   so an agent's lines name their queue without any bookkeeping on the hot path;
2. :func:`log_context` (a context variable: it follows the code into the tasks and worker
   threads it starts; the runtime sets it around every delivery, so a consumer's own log
   lines name the worker, queue and stream too, see :mod:`streams.core.logcontext`);
3. the filter's defaults (``configure_logging(worker=...)``), else ``None``.

Three formats: ``text``, for a person at a terminal (one line per record, then its
traceback as Python prints it: multi-line); ``logfmt`` (``key=value``, a traceback in one
quoted field) and ``json`` (one object per line), for files and collectors. The default is
``text`` when the stream is a terminal, else ``logfmt``.

>>> import io, logging
>>> out = io.StringIO()
>>> handler = configure_logging("info", "logfmt", stream=out, worker="w1", logger="headrace.doc")
>>> logging.getLogger("headrace.doc").warning("%s: queue unavailable", QueueId(3))
>>> print(out.getvalue().split(" ", 1)[1], end="")
level=warning logger=headrace.doc worker=w1 queue=3 stream=- msg="queue-3: queue unavailable"
>>> logging.getLogger("headrace.doc").removeHandler(handler)
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

from streams.core.errors import ConfigurationError
from streams.core.ids import QueueId, StreamId
from streams.core.logcontext import FIELDS, check_fields, current_fields

LEVELS = ("debug", "info", "warning", "error")
# Client libraries whose INFO lines are their own business (aiokafka logs each join, sync and
# assignment: most of a Kafka worker's start): they log one level below headrace's, so at
# ``info`` only their warnings and errors show, and ``debug`` shows their INFO lines too.
CLIENT_LIBRARIES = ("aiokafka",)
_LIBRARY_LEVELS = {"debug": "INFO", "info": "WARNING", "warning": "WARNING", "error": "ERROR"}
FORMATS = ("text", "logfmt", "json")
LogFormat = Literal["text", "logfmt", "json"]


class LogContextFilter(logging.Filter):
    """Sets ``record.worker``, ``record.queue`` and ``record.stream`` (see the module's
    docstring for where they come from); lets every record through."""

    def __init__(self, **defaults: Any) -> None:
        super().__init__()
        check_fields(defaults)
        self.defaults = defaults

    def filter(self, record: logging.LogRecord) -> bool:
        fields = {**self.defaults, **current_fields(), **_from_arguments(record.args)}
        for name in FIELDS:
            setattr(record, name, _plain(fields.get(name)))
        return True


def _from_arguments(args: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    values = args.values() if isinstance(args, Mapping) else args if isinstance(args, tuple) else ()
    for value in values:
        if isinstance(value, QueueId):
            found.setdefault("queue", value)
        elif isinstance(value, StreamId):
            found.setdefault("stream", value)
    return found


def _plain(value: Any) -> str | int | None:
    """A field as the formats write it: a queue as its number, a stream as ``ns/key``."""
    if value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, QueueId):
        return value.number
    return str(value)


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class KeyValueFormatter(logging.Formatter):
    """``ts=… level=… logger=… worker=… queue=… stream=… msg="…"`` (logfmt): a value with
    spaces, quotes or ``=`` is quoted as a JSON string; an unknown field is ``-``."""

    def format(self, record: logging.LogRecord) -> str:
        pairs = [
            ("ts", _timestamp(record)),
            ("level", record.levelname.lower()),
            ("logger", record.name),
            *((name, getattr(record, name, None)) for name in FIELDS),
            ("msg", record.getMessage()),
        ]
        line = " ".join(f"{key}={_logfmt(value)}" for key, value in pairs)
        if record.exc_info:
            line += f" exc={_logfmt(self.formatException(record.exc_info))}"
        return line


def _logfmt(value: Any) -> str:
    if value is None:
        return "-"
    text = str(value)
    if text and not any(c in text for c in ' ="\\\n\t'):
        return text
    return json.dumps(text, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """For a person: ``06:15:41.123 WARNING  worker=w1 queue=3 stream=ns/k  message``, then
    the traceback (if any) as Python prints it, the user's frame last.

    >>> record = logging.LogRecord("headrace.agent", logging.WARNING, "", 0, "queue-3: slow", None, None)
    >>> record.created = 0.0
    >>> TextFormatter().format(record)
    '00:00:00.000 WARNING  headrace.agent  queue-3: slow'
    """

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%S.%f")[:-3]
        fields = " ".join(f"{name}={value}" for name in FIELDS if (value := getattr(record, name, None)) is not None)
        where = f"{record.name} {fields}" if fields else record.name
        text = f"{moment} {record.levelname:<8} {where}  {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``worker``, ``queue``,
    ``stream``, ``msg`` (and ``exc`` with a traceback); an unknown field is ``null``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            **{name: getattr(record, name, None) for name in FIELDS},
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(
    level: str = "info",
    fmt: LogFormat | None = None,
    *,
    stream: TextIO | None = None,
    logger: str = "",
    **defaults: Any,
) -> logging.Handler:
    """Send ``logger``'s records (the root's by default) at ``level`` and above to ``stream``
    (stderr), as ``fmt`` (``text``, ``logfmt`` or ``json``; None: ``text`` on a terminal,
    else ``logfmt``), with the worker, queue and stream fields; ``defaults``
    (``worker=...``) fill a field nothing else names. Configuring the root's sets the
    :data:`CLIENT_LIBRARIES`' loggers one level quieter (``info``: their warnings and
    above). Returns the handler."""
    if level not in LEVELS:
        raise ConfigurationError(f"a log level is one of {', '.join(LEVELS)}, not {level!r}")
    if fmt is not None and fmt not in FORMATS:
        raise ConfigurationError(f"a log format is one of {', '.join(FORMATS)}, not {fmt!r}")
    out = stream or sys.stderr
    if fmt is None:
        fmt = "text" if out.isatty() else "logfmt"
    handler = logging.StreamHandler(out)
    handler.addFilter(LogContextFilter(**defaults))
    formatter = {"json": JsonFormatter, "logfmt": KeyValueFormatter, "text": TextFormatter}[fmt]
    handler.setFormatter(formatter())
    target = logging.getLogger(logger)
    target.addHandler(handler)
    target.setLevel(level.upper())
    if not logger:
        for library in CLIENT_LIBRARIES:
            logging.getLogger(library).setLevel(_LIBRARY_LEVELS[level])
    return handler
