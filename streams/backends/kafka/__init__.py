"""The Kafka backend: everything that talks to Kafka. The adapter and its receiver (``adapter``,
``receiver``, ``records``), the re-keying hop (``repartition``), the state changelog
(``state``), the dead-letter, subscription and status topics (``deadletters``, ``pubsub``,
``status``, over ``topic_log``), the group balancer (``balancer``, ``assignor``), the handoff log
on Kafka (``handoff_log``, ``handoff_records``, ``handoff_sink``, ``handoff_storage``), and the
backend that builds them (``backend``). ``aiokafka`` is imported here and nowhere else.

What every client shares is in one place: the cluster, topics and timeouts
(:class:`~streams.backends.kafka.settings.KafkaSettings`), and in
:mod:`streams.backends.kafka.clients` which failures are worth retrying, the outage log that
quiets aiokafka, creating topics, starting a client, a partition's offset bounds and whether a
cluster answers at all. The retry itself is :func:`streams.core.retry.retry`, the one every
client of headrace uses.
"""
