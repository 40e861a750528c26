"""How headrace reaches a Kafka cluster: its address, TLS and SASL (:class:`KafkaConnection`),
and the one place that turns them into aiokafka's keyword arguments
(:meth:`KafkaConnection.client_kwargs`), which every client headrace opens is made with:
the queues' consumers and producers, the admin client, the state changelog, the dead
letters, pub-sub, status, the handoff log and its Spark reader, the re-keying hop, and
every command of the CLI.

The settings are named as aiokafka (and kafka-python) name them. Files are PEM files; the
TLS context is built from them when a client is opened, so a renewed certificate is read
by the next client. Passwords are :class:`~streams.core.secret.Secret`: shown as ``***``.

>>> connection = KafkaConnection("broker:9093", security_protocol="SASL_SSL",
...     sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="app", sasl_plain_password="s3cret")
>>> connection.sasl_plain_password
Secret('***')
>>> kwargs = connection.client_kwargs()
>>> kwargs["security_protocol"], kwargs["sasl_mechanism"], kwargs["sasl_plain_password"]
('SASL_SSL', 'SCRAM-SHA-512', 's3cret')
"""

from __future__ import annotations

import importlib
import inspect
import ssl
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

from streams.core.errors import ConfigurationError, did_you_mean
from streams.core.secret import Secret, secret

if TYPE_CHECKING:
    from aiokafka.abc import AbstractTokenProvider

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
SECURITY_PROTOCOLS: tuple[SecurityProtocol, ...] = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: tuple[SaslMechanism, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# aiokafka client keyword arguments: the few that tune a connection, not its security.
ClientOptions = Mapping[str, object]
# What client_options may set: what every aiokafka client takes (producer, consumer, admin),
# less what the typed settings set. consumer_options: what consumers alone take, less what
# headrace sets itself for each of its consumers (their group, offsets and commits).
CLIENT_OPTIONS = ("client_id", "api_version", "connections_max_idle_ms", "metadata_max_age_ms", "retry_backoff_ms")
CONSUMER_OPTIONS = (
    "max_partition_fetch_bytes",
    "fetch_max_bytes",
    "fetch_min_bytes",
    "check_crcs",
    "client_rack",
    "isolation_level",
)


def cluster_name(bootstrap_servers: object) -> str:
    """How log lines and errors name a cluster.

    >>> cluster_name("127.0.0.1:9092"), cluster_name(["k1:9092", "k2:9092"])
    ('Kafka at 127.0.0.1:9092', 'Kafka at k1:9092,k2:9092')
    """
    servers = bootstrap_servers
    if not isinstance(servers, str) and isinstance(servers, Iterable):
        servers = ",".join(map(str, servers))
    return f"Kafka at {servers}"


@dataclass(frozen=True)
class KafkaConnection:
    """A Kafka cluster and how to connect to it.

    ``security_protocol``: ``PLAINTEXT`` (default), ``SSL``, ``SASL_PLAINTEXT`` or
    ``SASL_SSL``. With TLS: ``ssl_cafile`` (PEM, the CA that signed the brokers'
    certificates; default: the system's CAs), ``ssl_certfile`` and ``ssl_keyfile`` (PEM, a
    client certificate for mutual TLS), ``ssl_password`` (the key file's passphrase),
    ``ssl_check_hostname`` (default on: the broker's certificate must name its host), or
    ``ssl_context`` (an ``ssl.SSLContext`` built in code, instead of the files). With SASL:
    ``sasl_mechanism`` (``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``, ``OAUTHBEARER``),
    ``sasl_plain_username`` and ``sasl_plain_password`` (PLAIN and SCRAM), or
    ``sasl_oauth_token_provider`` (OAUTHBEARER): an aiokafka ``AbstractTokenProvider``, or its
    import path ``"module:attribute"`` (a class, made with no arguments, or an instance).

    ``client_options`` tune every client (``client_id``, ``metadata_max_age_ms``, ...);
    ``consumer_options`` tune the consumers alone (``max_partition_fetch_bytes``, ...).
    """

    bootstrap_servers: str | Sequence[str]
    _: KW_ONLY
    request_timeout: float = 5.0  # one attempt of a request to the broker
    security_protocol: SecurityProtocol = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: Secret | None = None
    ssl_check_hostname: bool = True
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False)
    sasl_mechanism: SaslMechanism = "PLAIN"
    sasl_plain_username: str | None = None
    sasl_plain_password: Secret | None = None
    sasl_oauth_token_provider: object = None  # "module:attribute", or an AbstractTokenProvider
    client_options: ClientOptions = field(default_factory=dict)
    consumer_options: ClientOptions = field(default_factory=dict)
    # The PEM files' contents, by setting name, once carrying_files() has read them.
    pem: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("ssl_password", "sasl_plain_password"):
            object.__setattr__(self, name, secret(getattr(self, name)))
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ConfigurationError(
                f"security_protocol is one of {', '.join(SECURITY_PROTOCOLS)}, not {self.security_protocol!r}"
            )
        self._check_tls()
        self._check_sasl()
        if not isinstance(self.ssl_check_hostname, bool):
            raise ConfigurationError(f"ssl_check_hostname is true or false, not {self.ssl_check_hostname!r}")
        _check_options("client_options", self.client_options, CLIENT_OPTIONS)
        _check_options("consumer_options", self.consumer_options, CONSUMER_OPTIONS)

    def _check_tls(self) -> None:
        """The ssl_* settings: given only with a TLS protocol, and not contradicting each other."""
        tls = self.tls
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_context"):
            if getattr(self, name) is not None and not tls:
                raise ConfigurationError(
                    f"{name} applies with security_protocol SSL or SASL_SSL, not {self.security_protocol}"
                )
        if self.ssl_context is not None and (self.ssl_cafile or self.ssl_certfile or self.ssl_keyfile):
            raise ConfigurationError("give ssl_context, or the ssl_cafile/ssl_certfile/ssl_keyfile it is built from")
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ConfigurationError("ssl_keyfile needs ssl_certfile: the client certificate it is the key of")

    def _check_sasl(self) -> None:
        """The sasl_* settings: given only with a SASL protocol, and what the mechanism needs."""
        sasl = self.security_protocol.startswith("SASL_")
        if self.sasl_mechanism not in SASL_MECHANISMS:
            raise ConfigurationError(
                f"sasl_mechanism is one of {', '.join(SASL_MECHANISMS)}, not {self.sasl_mechanism!r}"
            )
        given = [
            n for n in ("sasl_plain_username", "sasl_plain_password", "sasl_oauth_token_provider") if getattr(self, n)
        ]
        if given and not sasl:
            raise ConfigurationError(
                f"{given[0]} applies with security_protocol SASL_SSL or SASL_PLAINTEXT, not {self.security_protocol}"
            )
        if sasl and self.sasl_mechanism == "OAUTHBEARER":
            if self.sasl_oauth_token_provider is None:
                raise ConfigurationError(
                    "sasl_mechanism OAUTHBEARER needs sasl_oauth_token_provider: the import path "
                    "'module:attribute' of an aiokafka AbstractTokenProvider"
                )
        elif sasl and not (self.sasl_plain_username and self.sasl_plain_password is not None):
            raise ConfigurationError(
                f"sasl_mechanism {self.sasl_mechanism} needs sasl_plain_username and sasl_plain_password"
            )

    @classmethod
    def of(cls, connection: KafkaConnection | str) -> KafkaConnection:
        """``connection``, or a cluster that takes anyone in at the bootstrap servers given.

        >>> KafkaConnection.of("k:9092").security_protocol
        'PLAINTEXT'
        """
        return connection if isinstance(connection, KafkaConnection) else cls(connection)

    @property
    def server(self) -> str:
        """How log lines and errors name the cluster."""
        return cluster_name(self.bootstrap_servers)

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def client_kwargs(self) -> dict[str, object]:
        """The keyword arguments every aiokafka client of this cluster is made with: the
        address, the request timeout, TLS and SASL, and ``client_options``.

        >>> KafkaConnection("k:9092", request_timeout=2).client_kwargs()
        {'bootstrap_servers': 'k:9092', 'request_timeout_ms': 2000, 'security_protocol': 'PLAINTEXT'}
        """
        kwargs: dict[str, object] = {
            "bootstrap_servers": self.bootstrap_servers,
            "request_timeout_ms": int(self.request_timeout * 1000),
            **self.client_options,
            "security_protocol": self.security_protocol,
        }
        if self.tls:
            kwargs["ssl_context"] = self.ssl_context or self.new_ssl_context()
        if self.security_protocol.startswith("SASL_"):
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            if self.sasl_mechanism == "OAUTHBEARER":
                kwargs["sasl_oauth_token_provider"] = self.token_provider()
            else:
                assert self.sasl_plain_password is not None  # checked when made
                kwargs["sasl_plain_username"] = self.sasl_plain_username
                kwargs["sasl_plain_password"] = self.sasl_plain_password.reveal()
        return kwargs

    def consumer_kwargs(self, **headrace: object) -> dict[str, object]:
        """A consumer's keyword arguments: :meth:`client_kwargs`, then ``headrace``'s own for
        this consumer (its group, offset reset, ...), then ``consumer_options`` (which name
        none of headrace's: each key is given once).

        >>> KafkaConnection("k:9092", consumer_options={"max_partition_fetch_bytes": 8 << 20}).consumer_kwargs(
        ...     group_id=None, max_partition_fetch_bytes=1 << 20)["max_partition_fetch_bytes"]
        8388608
        """
        return {**self.client_kwargs(), **headrace, **self.consumer_options}

    def carrying_files(self) -> KafkaConnection:
        """This connection with the PEM files' contents read into it, for a process that
        does not have the files: a Spark executor, given the connection with its task.

        >>> KafkaConnection("k:9093", security_protocol="SSL").carrying_files().pem
        {}
        """
        pem = {name: _read_pem(name, getattr(self, name)) for name in _PEM_FILES if getattr(self, name) is not None}
        return replace(self, pem=pem)

    def new_ssl_context(self) -> ssl.SSLContext:
        """A TLS client context from the PEM files (the system's CAs without ``ssl_cafile``),
        or from the contents :meth:`carrying_files` read."""
        pem = dict(self.pem) or {
            name: _read_pem(name, getattr(self, name)) for name in _PEM_FILES if getattr(self, name) is not None
        }
        try:
            context = ssl.create_default_context(cadata=pem.get("ssl_cafile"))
            context.check_hostname = self.ssl_check_hostname
            if "ssl_certfile" in pem:
                password = self.ssl_password.reveal() if self.ssl_password is not None else None
                # load_cert_chain reads files only: a directory of this user's alone, for a moment.
                with tempfile.TemporaryDirectory(prefix="headrace-tls-") as directory:
                    certfile, keyfile = Path(directory, "cert.pem"), Path(directory, "key.pem")
                    certfile.write_text(pem["ssl_certfile"])
                    if "ssl_keyfile" in pem:
                        keyfile.touch(0o600)
                        keyfile.write_text(pem["ssl_keyfile"])
                    context.load_cert_chain(certfile, keyfile if "ssl_keyfile" in pem else None, password=password)
        except ssl.SSLError as exc:
            raise ConfigurationError(
                f"cannot load the TLS files (ssl_cafile, ssl_certfile, ssl_keyfile, ssl_password): {exc.reason or exc}; "
                "they are PEM files, and ssl_password is the key file's passphrase"
            ) from None
        return context

    def token_provider(self) -> AbstractTokenProvider:
        """The OAUTHBEARER token provider, imported from its path when it is one."""
        from aiokafka.abc import AbstractTokenProvider  # here: settings are read without aiokafka

        provider = self.sasl_oauth_token_provider
        if isinstance(provider, AbstractTokenProvider):
            return provider
        if not isinstance(provider, str):
            raise ConfigurationError(
                "sasl_oauth_token_provider is an aiokafka AbstractTokenProvider or its import path 'module:attribute'"
            )
        module, _, attribute = provider.partition(":")
        try:
            found: object = importlib.import_module(module)
            for part in attribute.split(".") if attribute else ():
                found = getattr(found, part)
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(
                f"sasl_oauth_token_provider {provider!r} cannot be imported ({exc}); it is 'module:attribute'"
            ) from None
        if not attribute:
            raise ConfigurationError(f"sasl_oauth_token_provider {provider!r} is 'module:attribute'")
        if inspect.isclass(found):
            found = found()
        if not isinstance(found, AbstractTokenProvider):
            raise ConfigurationError(
                f"sasl_oauth_token_provider {provider!r} is no aiokafka.abc.AbstractTokenProvider "
                "(a class with an async token() method, or an instance of one)"
            )
        return cast(AbstractTokenProvider, found)


_PEM_FILES = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")


def _read_pem(name: str, path: str) -> str:
    try:
        return Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a PEM file"
        raise ConfigurationError(f"{name} {path!r}: {reason} (a PEM file)") from None


def _check_options(name: str, options: ClientOptions, allowed: Sequence[str]) -> None:
    if not isinstance(options, Mapping):
        raise ConfigurationError(f"{name} maps option names to values, not {options!r}")
    for key in options:
        if key not in allowed:
            raise ConfigurationError(
                f"{name} {key!r} is not one headrace passes on{did_you_mean(str(key), allowed)}; "
                f"{name} takes {', '.join(allowed)} (the address and security are settings of their own)"
            )
