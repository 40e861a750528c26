"""Kafka's client pieces that the queue adapter (:mod:`streams.kafka.adapter`), the group
balancer (:mod:`balancer.kafka.group`) and the handoff log (:mod:`spark_sink.kafka.log`)
share, in one place:

- :mod:`streams.kafka.settings`: :class:`~streams.kafka.settings.KafkaSettings`, the cluster,
  topics and timeouts every client uses;
- :mod:`streams.kafka.clients`: which failures are worth retrying, the outage log that quiets
  aiokafka, and the retry with the settings' give-up time;
- :mod:`streams.kafka.clients`: creating topics and checking their partition counts;
- :mod:`streams.kafka.clients`: starting a client, a partition's offset bounds;
- :mod:`streams.kafka.clients`: whether a cluster answers at all, asked before starting.

It imports only :mod:`streams.core` (and aiokafka); the retry itself is
:func:`streams.core.retry.retry`, the one every client of headrace uses.
"""
