"""What a pulling agent keeps per active stream (agents.catalog.StreamState): its consumers by
subscription id and its activations by consumer type, the first of each in slots and a dict
from the second on, in the order they came."""

from __future__ import annotations

from types import SimpleNamespace

from agents.catalog import StreamState
from streams.core.ids import QueueId, StreamId
from streams.core.logcontext import DeliveryFields


def consumer(subscription_id: str) -> SimpleNamespace:
    return SimpleNamespace(subscription_id=subscription_id)


def test_consumers_are_kept_by_subscription_id_in_order_whatever_their_number():
    state = StreamState("w1", QueueId(0), StreamId("ns", "k"))
    a, b, c, a2 = consumer("a"), consumer("b"), consumer("c"), consumer("a")
    assert state.consumers == () and state.consumer("a") is None and state.remove_consumer("a") is None
    state.add_consumer(a)  # type: ignore[arg-type]
    assert state.consumers == (a,) and state.consumer("a") is a and state.consumer("b") is None
    state.add_consumer(a2)  # type: ignore[arg-type]  # the same subscription again: replaced
    assert state.consumers == (a2,)
    state.add_consumer(b)  # type: ignore[arg-type]
    state.add_consumer(c)  # type: ignore[arg-type]
    assert state.consumers == (a2, b, c) and state.consumer("b") is b
    assert state.remove_consumer("b") is b and state.remove_consumer("b") is None
    assert state.consumers == (a2, c)
    single = StreamState("w1", QueueId(0), StreamId("ns", "k"))
    single.add_consumer(b)  # type: ignore[arg-type]
    assert single.remove_consumer("a") is None and single.remove_consumer("b") is b and single.consumers == ()


def test_activations_are_kept_by_consumer_type_in_order_whatever_their_number():
    state = StreamState(None, QueueId(1), StreamId("ns", "k"))
    first, second, again = object(), object(), object()
    assert state.activations == [] and state.activation_of(int) is None
    state.set_activation(int, first)  # type: ignore[arg-type]
    assert state.activations == [(int, first)] and state.activation_of(int) is first
    assert state.activation_of(str) is None
    state.set_activation(str, second)  # type: ignore[arg-type]
    state.set_activation(int, again)  # type: ignore[arg-type]  # replaced where it stood
    assert state.activations == [(int, again), (str, second)]
    assert state.activation_of(str) is second and state.activation_of(float) is None


def test_the_log_fields_of_a_stream_read_as_a_mapping():
    fields = DeliveryFields("w1", QueueId(3), StreamId("ns", "k"))
    assert dict(fields) == {"worker": "w1", "queue": QueueId(3), "stream": StreamId("ns", "k")}
    assert {**fields, "stream": "other"}["stream"] == "other" and "queue" in fields and "x" not in fields


def test_a_stream_state_is_the_log_context_of_its_deliveries_and_equal_only_to_itself():
    state = StreamState("w1", QueueId(3), StreamId("ns", "k"))
    assert dict(state) == {"worker": "w1", "queue": QueueId(3), "stream": StreamId("ns", "k")}
    twin = StreamState("w1", QueueId(3), StreamId("ns", "k"))
    assert state != twin and state == state and len({state, twin}) == 2
