"""A secret setting (a password, a key's passphrase): its value is revealed to the client that
needs it and shown nowhere else. ``repr`` and ``str`` print ``***``, so a settings object that
holds one can be logged, printed in an error or dumped without giving it away.

A secret is given as its value, or named where it is kept, so that it is written in no
configuration file: :meth:`Secret.from_env` (an environment variable, as systemd's
``EnvironmentFile`` or a Kubernetes ``secretKeyRef`` sets it) or :meth:`Secret.from_file` (a
file, as a mounted Kubernetes secret or systemd's ``LoadCredential`` provides it).

>>> password = Secret("hunter2")
>>> password, str(password), f"{password}", password.reveal()
(Secret('***'), '***', '***', 'hunter2')
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from pathlib import Path

from streams.core.errors import ConfigurationError

MASK = "***"


class Secret:
    """A string shown as ``***``; :meth:`reveal` gives it to the one client that sends it.

    ``source`` says where it came from (``"environment variable KAFKA_PASSWORD"``), for
    messages about it; it is never the value.

    >>> Secret("a") == Secret("a"), Secret("a") == Secret("b")
    (True, False)
    """

    __slots__ = ("_value", "source")

    def __init__(self, value: str, source: str = "the value given") -> None:
        if not isinstance(value, str):
            raise ConfigurationError(f"a secret is a str, not a {type(value).__name__}")
        self._value = value
        self.source = source

    @classmethod
    def from_env(cls, name: str, environ: Mapping[str, str] | None = None) -> Secret:
        """The value of environment variable ``name``, read now; one clear error if unset.

        >>> Secret.from_env("PASSWORD", {"PASSWORD": "s3cret"}).reveal()
        's3cret'
        >>> Secret.from_env("PASSWORD", {})
        Traceback (most recent call last):
        ...
        streams.core.errors.ConfigurationError: environment variable 'PASSWORD' is not set (it holds a secret setting)
        """
        environ = os.environ if environ is None else environ
        if name not in environ:
            raise ConfigurationError(f"environment variable {name!r} is not set (it holds a secret setting)")
        return cls(environ[name], f"environment variable {name}")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Secret:
        """The content of the file at ``path``, read now, without the one line ending a
        file written by ``echo`` ends with.

        >>> Secret.from_file("/nonexistent/secret")
        Traceback (most recent call last):
        ...
        streams.core.errors.ConfigurationError: cannot read the secret file '/nonexistent/secret': No such file or directory
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise ConfigurationError(f"cannot read the secret file {str(path)!r}: {reason}") from None
        return cls(text.removesuffix("\n").removesuffix("\r"), f"file {path}")

    def reveal(self) -> str:
        """The value, for the client that sends it; never for a message or a log line."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret('{MASK}')"

    def __str__(self) -> str:
        return MASK

    def __format__(self, spec: str) -> str:
        return MASK

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __reduce__(self) -> tuple[type[Secret], tuple[str, str]]:
        # Pickled with its value: Spark ships a reader's options to its executors this way.
        return (Secret, (self._value, self.source))


def secret(value: str | Secret | None) -> Secret | None:
    """``value`` as a :class:`Secret` (a plain string given in code is wrapped).

    >>> secret("x"), secret(None)
    (Secret('***'), None)
    """
    if value is None or isinstance(value, Secret):
        return value
    return Secret(value)
