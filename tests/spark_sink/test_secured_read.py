"""Spark reads a Kafka handoff log over mutual TLS with the options of Spark's own Kafka source
(``kafka.security.protocol``, PEM files, the key's password), in batch and streaming: the
session broker behind a TLS terminator that requires a client certificate (tests.kafka_tls)."""

from __future__ import annotations

import pytest

from tests.kafka_tls import KEY_PASSPHRASE
from tests.spark_sink.handoff_testkit import STREAM, KafkaHandoff, collect_windows, window_results


def test_spark_reads_a_kafka_handoff_log_over_mutual_tls_in_batch_and_streaming(
    spark, secured_kafka, kafka_topic, events, expected, tmp_path
):
    certificates = secured_kafka.certificates
    handoff = KafkaHandoff(
        secured_kafka.mtls,
        kafka_topic,
        connection={
            "security_protocol": "SSL",
            "ssl_cafile": certificates["ca.pem"],
            "ssl_certfile": certificates["client.pem"],
            "ssl_keyfile": certificates["client-encrypted.key"],
            "ssl_password": KEY_PASSPHRASE,
        },
        reading={
            "kafka.security.protocol": "SSL",
            "kafka.ssl.cafile": certificates["ca.pem"],
            "kafka.ssl.certfile": certificates["client.pem"],
            "kafka.ssl.keyfile": certificates["client-encrypted.key"],
            "kafka.ssl.key.password": KEY_PASSPHRASE,
        },
    )
    handoff.append_windows(window_results(events))

    batch = spark.read.format("headrace").options(**handoff.options()).option("stream", STREAM).load()
    assert collect_windows(batch) == expected

    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (
        spark.readStream.format("headrace").options(**handoff.options()).option("stream", STREAM)
        .option("maxRecordsPerTrigger", "500").load()
        .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(120)
    assert query.exception() is None
    assert len([p for p in query.recentProgress if p["numInputRows"]]) > 1  # several batches, each over TLS
    assert collect_windows(spark.read.parquet(str(out))) == expected

    # Without the client certificate: the broker's refusal, in one line, not a minute of retries.
    refused = {k: v for k, v in handoff.options().items() if "certfile" not in k and "keyfile" not in k}
    refused.pop("kafka.ssl.key.password")
    with pytest.raises(Exception, match="the broker requires a client certificate it trusts"):
        spark.read.format("headrace").options(**refused).option("stream", STREAM).load()
    with pytest.raises(
        Exception, match="unknown Kafka option kafka.ssl.cafiel \\(did you mean 'kafka.ssl.cafile'\\?\\)"
    ):
        spark.read.format("headrace").options(**handoff.options(), **{"kafka.ssl.cafiel": "x"}).option(
            "stream", STREAM
        ).load()
