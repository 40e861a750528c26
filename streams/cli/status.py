"""``headrace status``: a cluster on an embedded store or on Kafka, as tables (or one JSON object).

Workers (live, stale, suspected or left, by their heartbeats and processes; those gone long
ago only with --all), each queue (its owner and lease epoch, records retained, checkpoint
and checkpoint lag: records, and the events in them, written but not yet acknowledged by
every consumer), dead letters by reason, and the Spark handoff streams with their end
offsets, the offsets Spark has committed, when, and the rows appended past them. Events in and out per second, cache fill, pressure, watermarks and the slowest
consumers come from what running workers write every ``status_interval``; a worker that
stopped writing is not shown there. Reading the store changes nothing in it.

On Kafka (``--config`` naming a Kafka adapter), the same from the cluster, from any machine:
the workers by the snapshots they publish to the status topic every ``status_interval``
and the consumer group's members, each partition's owner, committed and end offsets and
lag, the dead-letter topic by reason and the handoff topics' end offsets (and Spark's commits,
from the consumer group ``<prefix>.spark.<stream>``).

Each event-time consumer type's observed lateness (arrival − event time) and disorder (newest
event time − event time) over the last hour, sampled, per queue; with ``--advise``, the
``out_of_order`` and ``late_arrival`` that would have kept 99 % and 99.9 % of those events
unadjusted, their finalization delay, and what the policy in force adjusted and dropped.

What ``headrace status`` shows of observed lateness and disorder, and ``--advise``.

Workers sample one event in ``lateness_sample_every`` (``[agent]``) per queue and consumer
type into a sketch of the last hour (:mod:`streams.eventtime.lateness`); their status rows
carry it. ``status`` shows its quantiles per queue; ``status --advise`` merges each consumer
type's over the queues and prints the tolerances that would have kept 99 % and 99.9 % of the
observed events unadjusted, with what each costs in finalization delay, beside the policy in
force and what it adjusted and dropped (:mod:`streams.eventtime.lateness`; docs/cli.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterable
from functools import partial

import anyio
from rich.console import Console
from rich.markup import escape

from streams.adapters.status import (
    GONE_AFTER_TIMEOUTS,
    AgentStatus,
    ClusterStatus,
    QueueStatus,
    WorkerStatus,
)
from streams.cli import CliError
from streams.cli.advice import advice_of, observed, render_advice, reported_agents
from streams.cli.common import (
    add_config_options,
    add_row,
    console,
    existing_store,
    in_cluster,
    load_app,
    load_cli_config,
    plural,
    port_number,
    table,
    tls_files,
    utc_text,
)
from streams.cli.page import serve_page, store_options
from streams.core.errors import ConfigurationError
from streams.runtime.backends import Backend
from streams.runtime.config import HeadraceConfig, load_config

EXAMPLES = """examples:
  headrace status --path ./store
  headrace status --config headrace.toml
  headrace status --config kafka.toml         # a Kafka adapter: the whole cluster, from any machine
  headrace status --path ./store --all        # also workers gone long ago
  headrace status --path ./store --json | jq '.queues[] | select(.checkpoint_lag > 1000)'
  headrace status --path ./store --advise     # tolerances advised from the last hour's events
  headrace status --path ./store --serve      # the live status page at http://127.0.0.1:8765/
"""

SERVE_PORT = 8765  # `status --serve`'s default port


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "status",
        help="show workers, queues, checkpoint lag, cache and watermarks, dead letters, handoff",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_options(parser)
    parser.add_argument("--json", action="store_true", help="print the same as one JSON object")
    parser.add_argument(
        "--all", action="store_true", help="also the workers gone long ago (left or silent for 10 suspicion timeouts)"
    )
    parser.add_argument(
        "--advise",
        action="store_true",
        help="the out_of_order and late_arrival that would have kept 99%% and 99.9%% of the last hour's events unadjusted",
    )
    page = parser.add_argument_group("the live status page")
    page.add_argument(
        "--serve",
        action="store_true",
        help="serve the status as a live page (read-only, refreshed every 2 s) until Ctrl-C",
    )
    page.add_argument(
        "--port", type=port_number, default=SERVE_PORT, help=f"the page's port (default {SERVE_PORT}; 0: any free one)"
    )
    page.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="HOST",
        help="the address the page binds (default 127.0.0.1, this machine only; 0.0.0.0: every interface)",
    )
    page.add_argument(
        "--certfile",
        metavar="PEM",
        help="serve the page over HTTPS with this certificate (chain), and --keyfile "
        "(default: [worker] metrics_certfile and metrics_keyfile of the config)",
    )
    page.add_argument("--keyfile", metavar="PEM", help="the key of --certfile")


def run(args: argparse.Namespace) -> int:
    app = load_app(args)
    backend: Backend | None  # where the status is when it is not in a store on this machine
    if app is not None and app.store is None:
        config = load_config(args.config)  # the balancer's timeouts; the cluster is the app's
        backend = app.backend
    else:
        config = load_cli_config(args)
        backend = config.provider().backend if in_cluster(config) else None
    timeout = config.balancer.suspicion_timeout
    if args.serve:
        _serve(args, config, backend, timeout)
        return 0
    status = _read(args, config, backend, timeout, app is not None)
    if args.advise:
        _advise(status, as_json=args.json)
    elif args.json:
        print(json.dumps(status.as_dict()))
    else:
        render(status, console())
    return 0


def _serve(args: argparse.Namespace, config: HeadraceConfig, backend: Backend | None, timeout: float) -> None:
    """``--serve``: the live page until Ctrl-C."""
    if args.json or args.advise or args.all:
        raise CliError("--serve shows everything on the page: leave out --json, --advise and --all")
    where = store_options(args.path, args.config, args.app)
    certfile, keyfile = args.certfile, args.keyfile
    if certfile is None and keyfile is None:  # the worker endpoint's, from the config
        certfile, keyfile = config.worker.metrics_certfile, config.worker.metrics_keyfile
    tls = tls_files(certfile, keyfile, "the status page", "--certfile and --keyfile")
    if backend is not None:
        anyio.run(serve_page, backend, timeout, where, args.host, args.port, tls)
    else:
        with contextlib.closing(existing_store(config)) as store:
            anyio.run(serve_page, store, timeout, where, args.host, args.port, tls)


def _read(
    args: argparse.Namespace, config: HeadraceConfig, backend: Backend | None, timeout: float, from_app: bool
) -> ClusterStatus:
    """The cluster's status: from ``backend`` when it has one elsewhere, else from the store."""
    if backend is None:
        with contextlib.closing(existing_store(config)) as store:
            return anyio.run(partial(store.read_status, suspicion_timeout=timeout, everyone=args.all))
    try:
        return anyio.run(partial(backend.read_status, suspicion_timeout=timeout, everyone=args.all))
    except ConfigurationError as exc:
        raise CliError(f"--app {args.app}: {exc}" if from_app else str(exc)) from None


def _advise(status: ClusterStatus, *, as_json: bool) -> None:
    advice = advice_of(status)
    if not advice:
        raise CliError(
            "nothing to advise from: no running worker has reported event-time consumers' events of the "
            "last hour (a worker samples one event in [agent] lateness_sample_every)"
        )
    if as_json:
        print(json.dumps({a.consumer_type: a.as_dict() for a in advice}))
    else:
        render_advice(advice, console())


LONG_DELAY = 3600.0  # a watermark delay past this gets a word on why (delay_note)


def delay_text(seconds: float) -> str:
    """A watermark delay as the queues table shows it; a long one also in days or years.

    >>> delay_text(2.5), delay_text(95_789_332), delay_text(200_000)
    ('2.5 s', '95,789,332 s (3.0 years)', '200,000 s (2.3 days)')
    """
    if seconds < LONG_DELAY:
        return f"{seconds:,.1f} s"
    for unit, size in (("years", 365.25 * 86400), ("days", 86400.0), ("hours", 3600.0)):
        if seconds >= size:
            return f"{seconds:,.0f} s ({seconds / size:.1f} {unit})"
    return f"{seconds:,.0f} s"  # pragma: no cover - LONG_DELAY is an hour


def delay_note(queues: list[QueueStatus]) -> str | None:
    """Why a queue's watermark delay is long (the longest, when one is), in one line.

    The delay is processing time minus the lowest watermark, so it is long for one of two
    reasons the table cannot tell apart: the events' own times are that old (a replay of
    old data, normal), or a stream has had no event for that long (its windows wait).
    """
    delays = [(q.agent.watermark_delay, q.queue) for q in queues if q.agent and q.agent.watermark_delay is not None]
    if not delays or max(delays)[0] < LONG_DELAY:
        return None
    worst, queue = max(delays)
    return (
        f"delay {delay_text(worst)} on queue {queue}: the lowest watermark is that far behind the clock, because "
        "the events' times are that old (a replay of old data: windows still close by event time) or a stream "
        "has had no event since (late_arrival or idle_timeout move a silent one)"
    )


def render(status: ClusterStatus, out: Console) -> None:
    """The status as tables: workers, queues, slowest consumers, event time, failures, dead
    letters, handoff."""
    now = status.taken_at
    live = sum(1 for w in status.workers if w.state == "live")
    queues = "no queues yet" if status.queue_count is None else plural(status.queue_count, "queue")
    out.print(f"headrace {status.kind} {status.store}: {queues}, {plural(live, 'live worker')} at {utc_text(now)}")
    if status.group_members is not None:
        out.print(
            f"consumer group: {plural(len(status.group_members), 'member')} ({', '.join(status.group_members) or '-'})"
        )
    render_workers(status, out)
    if status.queues:
        render_queues(status.queues, out)
    render_fates(status, out)
    render_observed(status, out)
    render_failed(status, out)
    render_dead_letters_and_handoff(status, out)


def render_workers(status: ClusterStatus, out: Console) -> None:
    """The workers table (a clock column once a worker's wall clock stepped), and those not shown."""
    now = status.taken_at
    if status.workers:
        stepped = any(w.clock_steps for w in status.workers)
        rows = table(
            "workers", "worker", "state", "last heartbeat", "queues", "instance", *(["clock steps"] if stepped else [])
        )
        for w in status.workers:
            heartbeat = (
                f"{_ago(now, w.last_heartbeat)} ago" if w.left_at is None else f"left {_ago(now, w.left_at)} ago"
            )
            steps = [clock_steps_text(w, now)] if stepped else []
            add_row(rows, w.name, w.state, heartbeat, _ranges(w.queues) or "-", w.instance or "-", *steps)
        out.print(rows)
    elif not status.workers_not_shown:
        out.print("workers: none has joined (start one with `headrace worker`)")
    if status.workers_not_shown:
        out.print(
            f"{plural(status.workers_not_shown, 'worker')} gone for longer than "
            f"{GONE_AFTER_TIMEOUTS * status.suspicion_timeout:g} s not shown (--all shows them)"
        )


def clock_steps_text(worker: WorkerStatus, now: float) -> str:
    """A worker's wall-clock steps as the workers table shows them: how many, and the last.

    >>> w = WorkerStatus("w", "live", 0.0, 0.0, None, [0], clock_steps=2, clock_step=-600.0, clock_step_at=1714565220)
    >>> clock_steps_text(w, 1714565232.5)
    '2, last -600.0 s at 2024-05-01T12:07:00Z (12.5 s ago)'
    >>> clock_steps_text(WorkerStatus("v", "live", 0.0, 0.0, None, []), 0.0)
    '-'
    """
    if not worker.clock_steps or worker.clock_step_at is None:
        return "-"
    at = worker.clock_step_at
    return f"{worker.clock_steps:,}, last {worker.clock_step:+,.1f} s at {utc_text(at)} ({_ago(now, at)} ago)"


def render_queues(queues: list[QueueStatus], out: Console) -> None:
    """The queues table (with what running workers report of their agents), then the slowest consumers."""
    agents = any(q.agent is not None for q in queues)
    held = any(q.agent is not None and q.agent.held_by for q in queues)
    slow = any(q.agent is not None and q.agent.slowest_substreams for q in queues)
    holds = any(q.agent is not None and q.agent.checkpoint_holder for q in queues)
    optional = [
        *(["held back by"] if held else []),
        *(["slowest substreams"] if slow else []),
        *(["checkpoint held by"] if holds else []),
    ]
    extra = ("in/s", "out/s", "cache", "pressure", "streams", "watermark", "delay", *optional) if agents else ()
    rows = table("queues", "queue", "owner", "epoch", "retained", "next seq", "checkpoint", "lag", "lag events", *extra)
    for q in queues:
        agent = (["-"] * len(extra) if q.agent is None else _agent_cells(q.agent, held, slow, holds)) if agents else []
        add_row(rows, *_queue_cells(q), *agent)
    out.print(rows)
    if not agents:
        out.print("cache and watermarks: no running worker has reported them")
    note = delay_note(queues)
    if note is not None:
        out.print(note, highlight=False)
    behind = [(q.queue, lag) for q in queues if q.agent is not None for lag in q.agent.slowest]
    if behind:
        rows = table("slowest consumers", "queue", "stream", "subscription", "next seq", "behind (records)")
        for queue, lag in behind:
            add_row(rows, str(queue), lag.stream, lag.subscription, f"{lag.next_sequence:,}", f"{lag.behind:,}")
        out.print(rows)
    elif agents:
        out.print("slowest consumers: none behind (every consumer has what its worker read)")


def _queue_cells(q: QueueStatus) -> list[str]:
    lag_events = "-" if q.lag_events is None else f"{'>' if q.lag_events_more else ''}{q.lag_events:,}"
    return [
        str(q.queue),
        q.owner or "-",
        _opt(q.epoch),
        f"{q.retained:,}",
        f"{q.next_sequence:,}",
        _opt(q.checkpoint),
        f"{q.checkpoint_lag:,}",
        lag_events,
    ]


def _agent_cells(a: AgentStatus, held: bool, slow: bool, holds: bool) -> list[str]:
    return [
        _rate(a.events_in_per_s),
        _rate(a.events_out_per_s),
        f"{a.cache_size:,}/{a.cache_max:,}",
        "yes" if a.under_pressure else "no",
        f"{a.streams:,}",
        "-" if a.watermark_min is None else utc_text(a.watermark_min),
        "-" if a.watermark_delay is None else delay_text(a.watermark_delay),
        *([a.held_by or "-"] if held else []),
        *([a.slowest_substreams or "-"] if slow else []),
        *([a.checkpoint_holder.text() if a.checkpoint_holder else "-"] if holds else []),
    ]


def render_failed(status: ClusterStatus, out: Console) -> None:
    """A queue whose agent stopped because it cannot be read on (a deleted topic, no codec, ...)."""
    reported = [q.agent for q in status.queues if q.agent is not None] + status.agents
    for agent in sorted(reported, key=lambda a: a.queue):
        if agent.failed:
            out.print(f"[bold red]queue {agent.queue} FAILED[/] on {escape(agent.worker)}: {escape(agent.failed)}")


def render_dead_letters_and_handoff(status: ClusterStatus, out: Console) -> None:
    if status.dead_letters:
        rows = table("dead letters", "reason", "count", "replayed")
        for d in status.dead_letters:
            add_row(rows, d.reason, f"{d.count:,}", f"{d.replayed:,}")
        out.print(rows)
    else:
        out.print("dead letters: none")
    if status.handoff:
        heads = ("stream", "partitions", "end offsets", "committed by Spark", "behind", "committed", "rows retained")
        rows = table("Spark handoff", *heads)
        for h in status.handoff:
            committed = "-" if h.committed_offsets is None else _offsets(h.committed_offsets)
            at = "-" if h.committed_at is None else f"{_ago(status.taken_at, h.committed_at)} ago"
            ends = _offsets(h.end_offsets)
            add_row(rows, h.stream, str(len(h.end_offsets)), ends, committed, _opt(h.behind), at, f"{h.retained:,}")
        out.print(rows)


def _offsets(offsets: dict[int, int]) -> str:
    return ", ".join(f"{p}:{o:,}" for p, o in sorted(offsets.items())) or "-"


def render_fates(status: ClusterStatus, out: Console) -> None:
    """What event time did to the events, per consumer type, beside the queues."""
    if not status.consumer_types:
        return
    heads = (
        "events out",
        "events",
        "adjusted",
        "dropped",
        "dead-lettered",
        "windows emitted",
        "early results",
        "joins",
    )
    rows = table("by consumer type", "consumer type", *heads)
    for t in status.consumer_types:
        counts = (
            *(t.events_out, t.events, t.adjusted, t.dropped, t.dead_lettered),
            *(t.windows_emitted, t.early_results, t.joins_emitted),
        )
        add_row(rows, t.consumer_type, *(f"{n:,}" for n in counts))
    out.print(rows)


def _ago(now: float, t: float) -> str:
    return f"{max(0.0, now - t):,.1f} s"


def _rate(per_s: float | None) -> str:
    return "-" if per_s is None else f"{per_s:,.1f}"


def _opt(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _ranges(numbers: Iterable[int]) -> str:
    """``0-3, 6`` for ``[0, 1, 2, 3, 6]``."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def render_observed(status: ClusterStatus, out: Console) -> None:
    """Per queue and consumer type: sampled lateness and disorder quantiles, last hour."""
    rows_of = [(a.queue, name, seen) for a in reported_agents(status) for name, seen in sorted(a.observed.items())]
    if not rows_of:
        return
    every = max(seen.every for _, _, seen in rows_of)
    rows = table(
        f"lateness and disorder, last hour (1 event in {every:,} sampled)",
        "queue",
        "consumer type",
        "sampled",
        "lateness p50",
        "p99",
        "p99.9",
        "disorder p50",
        "p99",
        "p99.9",
        "worst substreams (p99 lateness, disorder)",
    )
    for queue, name, seen in sorted(rows_of, key=lambda r: (r[0], r[1])):
        subs = ", ".join(f"{key} ({observed(late)}, {observed(dis)})" for key, late, dis in seen.substreams)
        if seen.untracked:
            subs += f"{', ' if subs else ''}+{seen.untracked:,} samples of others"
        add_row(
            rows,
            str(queue),
            name,
            f"{seen.samples:,}",
            *(observed(v) for v in seen.quantiles("lateness")),
            *(observed(v) for v in seen.quantiles("disorder")),
            subs or "-",
        )
    out.print(rows)
