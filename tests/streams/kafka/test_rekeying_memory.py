"""The hop's memory of the source records it took (repartition.SeenSources): what the
changelog keeps at each commit is, per source partition, the highest source offset taken
before the committed offset, whatever the reads and the commits in between."""

from __future__ import annotations

import random

import msgpack
from aiokafka import ConsumerRecord

from streams.backends.kafka.repartition import SeenSources


def test_each_commit_keeps_the_newest_source_offset_taken_before_it_per_partition() -> None:
    chance = random.Random(3)
    records, sent = [], {p: 0 for p in range(4)}
    for offset in range(5_000):  # four sources' records interleaved, some sent twice
        partition = chance.randrange(4)
        if chance.random() < 0.05 and sent[partition] > 10:
            source = sent[partition] - chance.randrange(1, 10)  # a copy, sent again after a crash
        else:
            source = sent[partition] = sent[partition] + 1
        headers = [("headrace.source", b"%d:%d" % (partition, source))]
        records.append(ConsumerRecord("hop", 0, offset, 0, 0, b"k", b"{}", None, 1, 2, headers))
    seen, kept, start = SeenSources(), [], 0
    changelog: dict[int, int] = {}  # what the rows written so far say
    commits = sorted(chance.sample(range(1, 5_000), 40))
    for end in [*sorted(chance.sample(range(1, 5_000), 60)), 5_000]:  # reads of any length
        kept += seen.kept(records[start:end])
        start = end
        while commits and commits[0] <= end:
            at = commits.pop(0)
            newest: dict[int, int] = {}
            for r in kept:
                if r.offset < at:
                    partition, source = map(int, r.headers[0][1].split(b":"))
                    newest[partition] = source
            rows = seen.committed_rows(at)
            changelog.update({int(stream.split()[1]): msgpack.unpackb(state) for _, stream, _, _, state in rows})
            assert changelog == newest
            seen.saved(rows)
            assert seen.committed_rows(at) == []  # saved: nothing new
    assert seen.duplicates == 5_000 - len(kept) > 0
