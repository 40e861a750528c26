"""Fixtures shared by the whole suite: one Kafka-protocol broker per run (tests/kafka_fixtures.py)."""

pytest_plugins = ["tests.kafka_fixtures"]
