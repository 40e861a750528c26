"""Names vulture (``make lint``) reports as unused that something does use, by name.

Each group says who calls it. Anything not here that vulture reports is dead: remove it.
"""

# ruff: noqa
# mypy: ignore-errors
_ = object()

# Python calls these by name: lazy package attributes, dunder protocols, __aexit__'s signature.
__getattr__  # agents/, spark_sink/, streams/__init__.py: lazy imports
__dir__  # spark_sink/, streams/__init__.py
__call__  # agents/catalog.py
__lt__  # balancer/deployment_based.py: sorting
exc_type  # agents/turns.py: __aexit__'s parameters
tb

# Spark's DataSource V2 API calls the stream reader's methods by name.
_.initialOffset
_.getDefaultReadLimit
_.prepareForTriggerAvailableNow
_.latestOffset
_.reportLatestOffset
_.streamReader

# aiokafka calls these by name: a partition assignor and a rebalance listener.
_.on_assignment
_.on_partitions_revoked
revoked
_.on_partitions_assigned

# http.server's request handler and server hooks (the metrics endpoint).
_.log_message
_.handle_error
_.address_family
_.describe  # prometheus_client's Collector protocol

# The Orleans stream API and headrace's public API: a user calls them, the runtime does not.
_.get_my_queues  # IStreamQueueBalancer.GetMyQueues
_.get_all_subscription_handles  # IAsyncStream.GetAllSubscriptionHandles
_.apply_retention  # a retention pass on demand
_.create_pubsub_store  # the embedded adapter's stores for a worker built by hand
_.create_dead_letter_store
_.read_options  # Spark DataSource options for a configured stream
_.until_sleeping  # streams.testing: ManualClock
_.restart  # streams.testing: the harness
_.advance_to
_.instances
_.at_event_time  # state timers, as a consumer schedules them
_.at_processing_time
_.import_watermark  # the event-time processor, fed another stream's watermark
DROP  # an enum member a user names in a policy

# Fields of records a user reads (status, retention reports, history samples, batches, counters):
# dataclass and slot fields, read through asdict, repr, JSON or by the user.
dropped_first
dropped_last
lease_expires
lag_seconds
in_per_s
out_per_s
enqueued_time
_.detached
_.sweeps
_.writes
_._relative_offset  # aiokafka's batch builder reads it when the batch closes
late_arrival_adjusted
late_arrival_dropped
late_arrival_accepted
out_of_order_adjusted
out_of_order_dropped
out_of_order_accepted
window_closed
invalid_timestamp
invalid_value
idle_timeouts
punctuations
_.late_arrival_adjusted
_.late_arrival_dropped
_.late_arrival_accepted
_.out_of_order_adjusted
_.out_of_order_dropped
_.out_of_order_accepted
_.window_closed
_.invalid_value
_.invalid_timestamp
_.idle_timeouts
_.punctuations
