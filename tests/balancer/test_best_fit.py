"""The pure distributions: ideal, best fit over active workers, sticky."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from balancer import best_fit_distribution, ideal_distribution, sticky_distribution
from streams.core.ids import QueueId

worker_names = st.lists(st.text("abcdefgh", min_size=1, max_size=4), min_size=1, max_size=12, unique=True)
queue_counts = st.integers(min_value=0, max_value=64)


def queues(n: int) -> list[QueueId]:
    return [QueueId(i) for i in range(n)]


def assert_balanced(distribution: dict, expected_queues: list) -> None:
    owned = Counter(q for qs in distribution.values() for q in qs)
    assert sorted(owned) == sorted(expected_queues)
    assert set(owned.values()) <= {1}, "a queue is owned twice"
    loads = [len(qs) for qs in distribution.values()]
    assert max(loads) - min(loads) <= 1


def test_ideal_distribution_deals_contiguous_runs_first_workers_get_one_more():
    distribution = ideal_distribution(["w3", "w1", "w2"], queues(8))
    assert {w: [q.number for q in qs] for w, qs in distribution.items()} == {
        "w1": [0, 1, 2],
        "w2": [3, 4, 5],
        "w3": [6, 7],
    }


def test_fewer_queues_than_workers_leaves_the_last_workers_empty():
    distribution = ideal_distribution(["a", "b", "c", "d"], queues(2))
    assert [len(distribution[w]) for w in "abcd"] == [1, 1, 0, 0]


@given(worker_names, queue_counts)
def test_ideal_distribution_is_balanced_and_q_mod_w_workers_get_one_more(workers, q):
    distribution = ideal_distribution(workers, queues(q))
    assert_balanced(distribution, queues(q))
    ranked = sorted(workers)
    base, extra = divmod(q, len(ranked))
    assert [len(distribution[w]) for w in ranked] == [base + 1] * extra + [base] * (len(ranked) - extra)
    assert [x for w in ranked for x in distribution[w]] == queues(q)  # contiguous runs, in order


@given(worker_names, queue_counts, st.randoms())
def test_ideal_distribution_does_not_depend_on_input_order(workers, q, rnd):
    shuffled_workers, shuffled_queues = list(workers), queues(q)
    rnd.shuffle(shuffled_workers)
    rnd.shuffle(shuffled_queues)
    assert ideal_distribution(shuffled_workers, shuffled_queues) == ideal_distribution(workers, queues(q))


@given(worker_names, queue_counts, st.data())
def test_best_fit_every_queue_once_over_active_workers_who_keep_their_ideal(workers, q, data):
    active = data.draw(st.lists(st.sampled_from(workers), min_size=1, unique=True))
    distribution = best_fit_distribution(workers, active, queues(q))
    assert set(distribution) == set(active)
    assert_balanced(distribution, queues(q))
    ideal = ideal_distribution(workers, queues(q))
    for worker in active:
        assert distribution[worker][: len(ideal[worker])] == ideal[worker]


@given(worker_names, queue_counts, st.data(), st.randoms())
def test_best_fit_does_not_depend_on_input_order(workers, q, data, rnd):
    active = data.draw(st.lists(st.sampled_from(workers), min_size=1, unique=True))
    expected = best_fit_distribution(workers, active, queues(q))
    shuffled = [list(workers), list(active), queues(q)]
    for items in shuffled:
        rnd.shuffle(items)
    assert best_fit_distribution(*shuffled) == expected


def test_half_the_workers_down():
    workers = [f"w{i}" for i in range(6)]
    ideal = ideal_distribution(workers, queues(16))
    distribution = best_fit_distribution(workers, ["w0", "w2", "w4"], queues(16))
    assert sorted(len(qs) for qs in distribution.values()) == [5, 5, 6]
    assert_balanced(distribution, queues(16))
    for worker in ("w0", "w2", "w4"):
        assert set(ideal[worker]) <= set(distribution[worker])


def test_no_active_worker_owns_nothing():
    assert best_fit_distribution(["a", "b"], [], queues(4)) == {}


def test_an_active_worker_outside_the_workers_is_refused():
    try:
        best_fit_distribution(["a"], ["a", "z"], queues(4))
    except ValueError as error:
        assert "'z'" in str(error)
    else:
        raise AssertionError("an unknown active worker was accepted")


def moved_queues(before: dict, after: dict) -> set:
    owner_before = {q: w for w, qs in before.items() for q in qs}
    return {q for w, qs in after.items() for q in qs if owner_before.get(q) != w}


@given(worker_names, queue_counts, st.data())
def test_best_fit_minimal_movement_when_one_comes_back(workers, q, data):
    """The returning worker gets its ideal queues; queues of workers that stayed up never
    move; only the still-down workers' queues (orphans, dealt statelessly) may shift."""
    active = data.draw(st.lists(st.sampled_from(workers), min_size=1, unique=True))
    down = [w for w in workers if w not in active]
    if not down:
        return
    returning = data.draw(st.sampled_from(down))
    before = best_fit_distribution(workers, active, queues(q))
    after = best_fit_distribution(workers, [*active, returning], queues(q))
    ideal = ideal_distribution(workers, queues(q))
    assert after[returning][: len(ideal[returning])] == ideal[returning]
    still_down = {queue for w in down if w != returning for queue in ideal[w]}
    assert moved_queues(before, after) <= set(ideal[returning]) | still_down


def test_best_fit_all_up_after_one_returns_moves_exactly_its_queues():
    workers = ["a", "b", "c", "d"]
    before = best_fit_distribution(workers, ["a", "b", "c"], queues(12))
    after = best_fit_distribution(workers, workers, queues(12))
    assert after == ideal_distribution(workers, queues(12))
    assert len(moved_queues(before, after)) == 3 == len(after["d"])


@given(worker_names, queue_counts)
def test_sticky_without_history_is_the_ideal_distribution(workers, q):
    assert sticky_distribution(workers, queues(q), {}) == ideal_distribution(workers, queues(q))


@given(worker_names, queue_counts, st.data())
def test_sticky_is_balanced_whatever_the_claims(workers, q, data):
    claims = data.draw(st.dictionaries(st.sampled_from(workers), st.lists(st.integers(0, q + 3), max_size=q + 3)))
    previous = {w: [QueueId(n) for n in ns] for w, ns in claims.items()}  # overlapping, stale
    distribution = sticky_distribution(workers, queues(q), previous)
    assert set(distribution) == set(workers)
    assert_balanced(distribution, queues(q))


@given(worker_names, queue_counts, st.text("xyz", min_size=1, max_size=3))
def test_sticky_minimal_movement_when_one_joins(workers, q, newcomer):
    """Starting balanced, a newcomer's share is exactly what moves."""
    before = ideal_distribution(workers, queues(q))
    after = sticky_distribution([*workers, newcomer], queues(q), before)
    assert_balanced(after, queues(q))
    assert len(moved_queues(before, after)) == len(after[newcomer])


def test_sticky_keeps_history_in_any_input_order():
    previous = {"b": queues(5), "a": [QueueId(5)]}
    expected = sticky_distribution(["a", "b", "c"], queues(6), previous)
    order = ["c", "b", "a"]
    random.Random(4).shuffle(order)
    assert sticky_distribution(order, list(reversed(queues(6))), previous) == expected
    assert [q.number for q in expected["b"]] == [0, 1]
    assert [q.number for q in expected["a"]] == [5, 2]
