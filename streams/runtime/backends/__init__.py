"""What a provider runs on: one module per backend (memory, embedded, Kafka) builds the queue
adapter factory, the queue mapper, the default balancer, the pub-sub and dead-letter stores
and the Spark handoff sinks; :class:`~streams.runtime.backends.base.Backend` is what the provider
asks of each."""
