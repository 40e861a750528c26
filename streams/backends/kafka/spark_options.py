"""The ``kafka.*`` options of the ``headrace`` DataSource: Spark's Kafka source's own names,
read into a :class:`~streams.backends.kafka.connection.KafkaConnection`, so that the options a
Spark job already passes to ``format("kafka")`` reach the handoff log on the same cluster.

Each option is converted by what it is (a number where aiokafka takes one, a password
always a string), and an option of no meaning here is one error naming those there are.
:func:`spark_options` is the other way: a connection as those options.

>>> connection = connection_from_spark({
...     "kafka.bootstrap.servers": "broker:9093",
...     "kafka.security.protocol": "SASL_SSL",
...     "kafka.sasl.mechanism": "SCRAM-SHA-512",
...     "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
...                               'required username="app" password="123456";'})
>>> connection.sasl_plain_username, connection.sasl_plain_password.reveal()
('app', '123456')
>>> spark_options(connection)["kafka.sasl.jaas.config"]
'org.apache.kafka.common.security.scram.ScramLoginModule required username="app" password="123456";'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from streams.backends.kafka.connection import KafkaConnection
from streams.core.errors import ConfigurationError, did_you_mean
from streams.core.secret import Secret

_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+required\b(?P<pairs>.*?)\s*;?\s*$", re.DOTALL)
_PAIR = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _int(option: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < 0:
            raise ConfigurationError(f"option {option} is a whole number >= 0, not {text!r}")
        return value

    return parse


def _hostname_check(text: str) -> bool:
    if text.lower() not in ("", "https"):
        raise ConfigurationError(
            f"option kafka.ssl.endpoint.identification.algorithm is 'https' (check the broker's "
            f"host name, the default) or '' (do not), not {text!r}"
        )
    return text.lower() == "https"


# Spark's option -> (KafkaConnection field, how its text is read). client_id and the fetch
# size go to client_options / consumer_options.
_OPTIONS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "kafka.bootstrap.servers": ("bootstrap_servers", str),
    "kafka.security.protocol": ("security_protocol", str.upper),
    "kafka.sasl.mechanism": ("sasl_mechanism", str.upper),
    "kafka.ssl.cafile": ("ssl_cafile", str),
    "kafka.ssl.certfile": ("ssl_certfile", str),
    "kafka.ssl.keyfile": ("ssl_keyfile", str),
    "kafka.ssl.key.password": ("ssl_password", lambda text: Secret(text, "option kafka.ssl.key.password")),
    "kafka.ssl.endpoint.identification.algorithm": ("ssl_check_hostname", _hostname_check),
    "kafka.sasl.oauth.token.provider": ("sasl_oauth_token_provider", str),
    "kafka.request.timeout.ms": ("request_timeout", lambda text: _int("kafka.request.timeout.ms")(text) / 1000),
    "kafka.client.id": ("client_id", str),
    "kafka.max.partition.fetch.bytes": ("max_partition_fetch_bytes", _int("kafka.max.partition.fetch.bytes")),
}
_JAAS_OPTION = "kafka.sasl.jaas.config"
_JKS = ("kafka.ssl.truststore.location", "kafka.ssl.keystore.location")
KNOWN_OPTIONS = (*_OPTIONS, _JAAS_OPTION)


def connection_from_spark(options: Mapping[str, str]) -> KafkaConnection:
    """The connection the ``kafka.*`` options (names in any case) describe.

    >>> connection_from_spark({"kafka.bootstrap.servers": "k:9092", "kafka.ssl.truststore.location": "t.jks"})
    Traceback (most recent call last):
    ...
    streams.core.errors.ConfigurationError: option kafka.ssl.truststore.location: Java key stores are not read here; give the CA as a PEM file in kafka.ssl.cafile (keytool -exportcert -rfc -keystore t.jks > ca.pem)
    """
    fields: dict[str, Any] = {}
    client: dict[str, object] = {}
    consumer: dict[str, object] = {}
    for name, text in options.items():
        key = name.lower()
        if key in _JKS:
            instead = (
                f"the CA as a PEM file in kafka.ssl.cafile (keytool -exportcert -rfc -keystore {text} > ca.pem)"
                if "truststore" in key
                else "the client certificate and key as PEM files in kafka.ssl.certfile and kafka.ssl.keyfile"
            )
            raise ConfigurationError(f"option {name}: Java key stores are not read here; give {instead}")
        if key in ("kafka.sasl.plain.username", "kafka.sasl.plain.password"):
            raise ConfigurationError(
                f"option {name}: Spark's Kafka source takes the user name and password in "
                f'{_JAAS_OPTION}: {_PLAIN_MODULE} required username="..." password="...";'
            )
        if key == _JAAS_OPTION:
            fields.update(_jaas(text))
            continue
        if key not in _OPTIONS:
            raise ConfigurationError(
                f"unknown Kafka option {name}{did_you_mean(key, KNOWN_OPTIONS)}; the kafka.* options "
                f"are {', '.join(KNOWN_OPTIONS)}"
            )
        field, parse = _OPTIONS[key]
        value = parse(text)
        if field == "client_id":
            client[field] = value
        elif field == "max_partition_fetch_bytes":
            consumer[field] = value
        else:
            fields[field] = value
    mechanism = str(fields.get("sasl_mechanism", "PLAIN"))
    module = fields.pop("_module", None)
    if module is not None and mechanism.startswith("SCRAM") != (module == _SCRAM_MODULE):
        raise ConfigurationError(
            f"option {_JAAS_OPTION} names {module.rsplit('.', 1)[-1]}, which is not the login "
            f"module of kafka.sasl.mechanism {mechanism}"
        )
    servers = fields.pop("bootstrap_servers")
    try:
        connection = KafkaConnection(servers, **fields, client_options=client, consumer_options=consumer)
    except ConfigurationError as exc:
        raise ConfigurationError(f"the kafka.* options: {exc}") from None
    try:  # the executors get the PEM files' contents with their tasks: they need no files
        return connection.carrying_files()
    except ConfigurationError as exc:
        raise ConfigurationError(f"the kafka.* options: {exc}") from None


def _jaas(text: str) -> dict[str, Any]:
    """The user name and password of a PLAIN or SCRAM login module's JAAS line (never shown
    in an error: it holds the password)."""
    match = _JAAS.match(text)
    if match is None:
        raise ConfigurationError(
            f"option {_JAAS_OPTION} is not a JAAS line: it reads "
            f'{_PLAIN_MODULE} required username="..." password="...";'
        )
    module = match["module"]
    if module not in (_PLAIN_MODULE, _SCRAM_MODULE):
        raise ConfigurationError(
            f"option {_JAAS_OPTION} names {module}: only PLAIN and SCRAM logins are read from it; "
            "for OAUTHBEARER give kafka.sasl.oauth.token.provider (module:attribute of a token provider)"
        )
    pairs = {key: re.sub(r"\\(.)", r"\1", value) for key, value in _PAIR.findall(match["pairs"])}
    if "username" not in pairs or "password" not in pairs:
        raise ConfigurationError(f'option {_JAAS_OPTION} needs username="..." and password="..."')
    return {
        "_module": module,
        "sasl_plain_username": pairs["username"],
        "sasl_plain_password": Secret(pairs["password"], f"option {_JAAS_OPTION}"),
    }


def spark_options(connection: KafkaConnection) -> dict[str, str]:
    """``connection`` as the DataSource's ``kafka.*`` options (Spark's names)."""
    options = {
        "kafka.bootstrap.servers": connection.bootstrap_servers
        if isinstance(connection.bootstrap_servers, str)
        else ",".join(connection.bootstrap_servers),
    }
    if connection.security_protocol != "PLAINTEXT":
        options["kafka.security.protocol"] = connection.security_protocol
    for option, (field, _parse) in _OPTIONS.items():
        value = getattr(connection, field, None)
        if field in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "sasl_oauth_token_provider") and value:
            options[option] = str(value)
    if connection.ssl_password is not None:
        options["kafka.ssl.key.password"] = connection.ssl_password.reveal()
    if not connection.ssl_check_hostname:
        options["kafka.ssl.endpoint.identification.algorithm"] = ""
    if connection.request_timeout != KafkaConnection.request_timeout:
        options["kafka.request.timeout.ms"] = str(round(connection.request_timeout * 1000))
    for option, value in (*connection.client_options.items(), *connection.consumer_options.items()):
        options[f"kafka.{option.replace('_', '.')}"] = str(value)
    if connection.security_protocol.startswith("SASL_"):
        options["kafka.sasl.mechanism"] = connection.sasl_mechanism
        if connection.sasl_plain_password is not None:
            module = _SCRAM_MODULE if connection.sasl_mechanism.startswith("SCRAM") else _PLAIN_MODULE
            user, password = (
                _escaped(str(connection.sasl_plain_username)),
                _escaped(connection.sasl_plain_password.reveal()),
            )
            options[_JAAS_OPTION] = f'{module} required username="{user}" password="{password}";'
    return options


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
