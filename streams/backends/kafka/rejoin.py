"""A restarted worker rejoins its consumer group as the member it was.

A worker killed outright (SIGKILL, a crash) stays a member of the group until its session
expires; a new process joining meanwhile under a new member id waits for that, then for a
full rebalance that takes queues from the live workers and gives them back. Kafka's group
coordinator instead answers a *known* member whose join metadata is unchanged with the
group's current generation and its current assignment, at once. So after each assignment a
worker notes who it is in the group (:class:`Incarnation`: member id, generation, the claim
its join sent, its queues) beside its local state store, and a worker started on that store
joins with that member id and that claim: it gets its old queues back, and no other worker
loses any.

**One process per member id.** Neither Kafka nor Tansu fences two live processes under one
member id: the note is written and read only while the worker holds its local state store's
slot lock (:mod:`streams.backends.embedded.changelog_copy`), so a second process on the same
state directory takes another slot, and with it another note or none. A clean stop leaves
the group and deletes the note. A note whose member the broker no longer knows (its session
expired, the group was emptied) gets ``UNKNOWN_MEMBER_ID`` on the join: aiokafka then joins
as a new member, as without a note.

The member id is set on aiokafka's group coordinator (private: aiokafka has no API for it)
after the consumer starts and before it subscribes, i.e. before its first JoinGroup.
:func:`rejoin_as` checks the coordinator is in that state and otherwise leaves it be, so an
aiokafka that moves it joins as new, never wrongly (``tests/balancer/test_kafka_rejoin.py``
fails on it).

>>> from aiokafka.structs import TopicPartition
>>> was = Incarnation("w1", "m-1", 3, (), (TopicPartition("t", 0),), (), None)
>>> Incarnation.decode(was.encode()) == was
True
>>> Incarnation.decode(b"not json") is None
True
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Protocol

from aiokafka import AIOKafkaConsumer
from aiokafka.protocol.group import JoinGroupRequest
from aiokafka.structs import TopicPartition

from streams.backends.kafka.assignor import _pairs, _partitions  # the claim's encoding of partitions

log = logging.getLogger("headrace.balancer")

NOTE = "group-member"  # the note's name beside the local state store


class Notes(Protocol):
    """Small notes kept beside a worker's local state store while it holds its lock
    (:class:`~streams.backends.embedded.changelog_copy.ChangelogCopy`)."""

    def read_note(self, name: str) -> bytes | None: ...

    def write_note(self, name: str, data: bytes | None) -> None: ...


@dataclass(frozen=True, slots=True)
class Incarnation:
    """Who a worker was in its group at its last assignment: its worker name, member id and
    generation, the partitions its last join claimed (owned and standby: the join metadata
    the broker holds for it), and those the assignment gave it."""

    worker: str
    member_id: str
    generation: int
    claimed: tuple[TopicPartition, ...]
    owned: tuple[TopicPartition, ...]
    standby: tuple[TopicPartition, ...]
    claimed_standby: tuple[TopicPartition, ...] | None

    def encode(self) -> bytes:
        fields = {
            "worker": self.worker,
            "member_id": self.member_id,
            "generation": self.generation,
            "claimed": _pairs(self.claimed),
            "claimed_standby": None if self.claimed_standby is None else _pairs(self.claimed_standby),
            "owned": _pairs(self.owned),
            "standby": _pairs(self.standby),
        }
        return json.dumps(fields).encode()

    @classmethod
    def decode(cls, data: bytes) -> Incarnation | None:
        """The incarnation in ``data``; ``None`` for anything else (another format, a torn file)."""
        try:
            fields = json.loads(data)
            standby = fields["claimed_standby"]
            found = cls(
                str(fields["worker"]),
                str(fields["member_id"]),
                int(fields["generation"]),
                _partitions(fields["claimed"]),
                _partitions(fields["owned"]),
                _partitions(fields["standby"]),
                None if standby is None else _partitions(standby),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return found if found.member_id and found.member_id != JoinGroupRequest.UNKNOWN_MEMBER_ID else None


def recall(notes: Notes, worker: str) -> Incarnation | None:
    """The incarnation noted in ``notes`` if it was ``worker``'s; ``None``: join as new."""
    data = notes.read_note(NOTE)
    found = None if data is None else Incarnation.decode(data)
    if found is None or found.worker != worker:
        return None
    return found


def remember(notes: Notes, incarnation: Incarnation | None) -> None:
    """Note ``incarnation`` (``None``: delete the note); a failure is logged, never raised:
    without a note the next start joins as new."""
    try:
        notes.write_note(NOTE, None if incarnation is None else incarnation.encode())
    except Exception as exc:  # a full disk, a closed store: the next start joins as new
        log.warning("could not note this worker's group membership: %s", exc)


def rejoin_as(consumer: AIOKafkaConsumer, member_id: str) -> bool:
    """Make ``consumer`` (started, not yet subscribed) send its first JoinGroup as
    ``member_id``; ``False`` (and nothing changed) when its group coordinator is not in the
    state this expects."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or getattr(coordinator, "member_id", None) != JoinGroupRequest.UNKNOWN_MEMBER_ID:
        log.warning("aiokafka's group coordinator is not as expected: joining as a new member")
        return False
    if consumer.subscription():
        return False  # subscribed: the join may be under way already
    coordinator.member_id = member_id
    return True
