"""The DataSource's kafka.* options: Spark's Kafka source's names, each read by what it is,
and one clear error for an option of no meaning here (no Spark needed)."""

from __future__ import annotations

import pytest

from streams.backends.kafka.spark_options import KNOWN_OPTIONS, connection_from_spark, spark_options
from streams.core.errors import ConfigurationError

SERVERS = {"kafka.bootstrap.servers": "k1:9093,k2:9093"}


def test_each_option_is_read_by_what_it_is(tmp_path):
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    connection = connection_from_spark({
        **SERVERS,
        "kafka.security.protocol": "sasl_ssl",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                  'username="12345" password="1\\"2\\\\3";',
        "kafka.ssl.cafile": str(tmp_path / "ca.pem"),
        "kafka.ssl.endpoint.identification.algorithm": "",
        "kafka.request.timeout.ms": "20000",
        "kafka.max.partition.fetch.bytes": "8388608",
        "kafka.client.id": "007",
    })  # fmt: skip
    assert connection.sasl_plain_username == "12345"  # a user name that looks like a number stays a str
    assert connection.sasl_plain_password is not None and connection.sasl_plain_password.reveal() == '1"2\\3'
    assert (connection.security_protocol, connection.ssl_cafile, connection.ssl_check_hostname) == (
        "SASL_SSL", str(tmp_path / "ca.pem"), False,
    )  # fmt: skip
    assert connection.request_timeout == 20.0
    assert connection.client_options == {"client_id": "007"}
    assert connection.consumer_options == {"max_partition_fetch_bytes": 8388608}
    assert connection_from_spark(spark_options(connection)) == connection  # and back, escapes included
    assert '1\\"2' not in repr(connection) and "***" in repr(connection)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kafka.sasl.plain.password": "secret-pw"}, "option kafka.sasl.plain.password: Spark's Kafka source takes"),
        ({"kafka.sasl.kerberos.service.name": "k"}, "unknown Kafka option kafka.sasl.kerberos.service.name; the "),
        ({"kafka.ssl.cafiel": "x"}, "unknown Kafka option kafka.ssl.cafiel (did you mean 'kafka.ssl.cafile'?)"),
        (
            {"kafka.ssl.truststore.location": "t.jks"},
            "option kafka.ssl.truststore.location: Java key stores are not read",
        ),
        ({"kafka.request.timeout.ms": "soon"}, "option kafka.request.timeout.ms is a whole number >= 0, not 'soon'"),
        (
            {
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "SCRAM-SHA-512",
                "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                'username="u" password="secret-pw";',
            },
            "option kafka.sasl.jaas.config names PlainLoginModule, which is not the login module of "
            "kafka.sasl.mechanism SCRAM-SHA-512",
        ),
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": "username=secret-pw"},
            "option kafka.sasl.jaas.config is not a JAAS line",
        ),
        (
            {
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "OAUTHBEARER",
                "kafka.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            },
            "option kafka.sasl.jaas.config names org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule: "
            "only PLAIN and SCRAM logins are read from it; for OAUTHBEARER give kafka.sasl.oauth.token.provider",
        ),
        (
            {"kafka.security.protocol": "SASL_SSL"},
            "the kafka.* options: sasl_mechanism PLAIN needs sasl_plain_username",
        ),
    ],
)
def test_a_mistake_is_one_line_naming_the_option_never_the_password(options, message):
    with pytest.raises(ConfigurationError) as refused:
        connection_from_spark({**SERVERS, **options})
    assert str(refused.value).startswith(message)
    assert "secret-pw" not in str(refused.value)
    if "unknown Kafka option" in message:
        assert str(refused.value).endswith(", ".join(KNOWN_OPTIONS))


def test_an_oauthbearer_provider_is_imported_by_its_path():
    connection = connection_from_spark({
        **SERVERS,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.oauth.token.provider": "tests.streams.kafka.token_provider:StaticToken",
    })  # fmt: skip
    provider = connection.client_kwargs()["sasl_oauth_token_provider"]
    assert type(provider).__name__ == "StaticToken"
    wrong = connection_from_spark({**SERVERS, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER",
                                   "kafka.sasl.oauth.token.provider": "tests.streams.kafka.token_provider:nothing"})  # fmt: skip
    with pytest.raises(
        ConfigurationError,
        match="sasl_oauth_token_provider 'tests.streams.kafka.token_provider:nothing' cannot be imported",
    ):
        wrong.client_kwargs()
