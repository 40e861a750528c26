"""What ``headrace status`` shows of observed lateness and disorder, and ``--advise``.

Workers sample one event in ``lateness_sample_every`` (``[agent]``) per queue and consumer
type into a sketch of the last hour (:mod:`streams.eventtime.lateness`); their status rows
carry it. ``status`` shows its quantiles per queue; ``status --advise`` merges each consumer
type's over the queues and prints the tolerances that would have kept 99 % and 99.9 % of the
observed events unadjusted, with what each costs in finalization delay, beside the policy in
force and what it adjusted and dropped (:mod:`streams.eventtime.advice`; docs/cli.md).
"""

from __future__ import annotations

import math

from rich.console import Console

from streams.cli.common import add_row, plural, table
from streams.eventtime.advice import SHARES, Tolerances, advise, current
from streams.eventtime.lateness import ObservedTimes
from streams.runtime.status import AgentStatus, ClusterStatus, consumer_type_fates, observed_by_type


def reported_agents(status: ClusterStatus) -> list[AgentStatus]:
    """Every fresh agent row: those shown with their queue and the others."""
    return [q.agent for q in status.queues if q.agent is not None] + status.agents


def seconds(value: float | None) -> str:
    """A duration for a table cell.

    >>> seconds(0.0123), seconds(4.5), seconds(1234.0), seconds(None), seconds(math.nan)
    ('12 ms', '4.50 s', '1,234 s', 'off', '-')
    """
    if value is None:
        return "off"
    if math.isnan(value):
        return "-"
    if value < 1.0:
        return f"{value * 1000:,.0f} ms"
    return f"{value:,.2f} s" if value < 100 else f"{value:,.0f} s"


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
        subs = ", ".join(f"{key} ({seconds(late)}, {seconds(dis)})" for key, late, dis in seen.substreams)
        if seen.untracked:
            subs += f"{', ' if subs else ''}+{seen.untracked:,} samples of others"
        add_row(
            rows,
            str(queue),
            name,
            f"{seen.samples:,}",
            *(seconds(v) for v in seen.quantiles("lateness")),
            *(seconds(v) for v in seen.quantiles("disorder")),
            subs or "-",
        )
    out.print(rows)


def advice_of(status: ClusterStatus) -> dict[str, dict[str, object]]:
    """Per consumer type: what was observed, the policy in force with its fates, and the
    advised tolerances (the ``--advise --json`` object)."""
    agents = reported_agents(status)
    fates = {t.consumer_type: t for t in consumer_type_fates(agents)}
    found: dict[str, dict[str, object]] = {}
    for name, seen in observed_by_type(agents).items():
        if not seen.samples:
            continue
        fate = fates.get(name)
        found[name] = {
            "sampled": seen.samples,
            "every": seen.every,
            "lateness": dict(zip(("p50", "p99", "p99.9"), seen.quantiles("lateness"))),
            "disorder": dict(zip(("p50", "p99", "p99.9"), seen.quantiles("disorder"))),
            "current": {
                **_setting(seen, current(seen)),
                "events": fate.events if fate else 0,
                "adjusted": fate.adjusted if fate else 0,
                "dropped": fate.dropped if fate else 0,
                "dead_lettered": fate.dead_lettered if fate else 0,
            },
            **{f"{share:.1%}".replace(".0%", "%"): _setting(seen, advise(seen, share)) for share in SHARES},
        }
    return found


def _setting(seen: ObservedTimes, t: Tolerances) -> dict[str, object]:
    return {
        "out_of_order": t.out_of_order,
        "late_arrival": t.late_arrival,
        "finalization_delay": t.delay,
        "within_out_of_order": seen.share_within("disorder", t.out_of_order),
        "within_late_arrival": seen.share_within("lateness", t.late_arrival),
    }


def render_advice(advice: dict[str, dict[str, object]], out: Console) -> None:
    """One table per consumer type: the policy in force, then each advised setting."""
    for name, a in advice.items():
        rows = table(
            f"{name}: tolerances from {plural(_int(a['sampled']), 'sampled event')} of the last hour "
            f"(1 in {_int(a['every']):,})",
            "setting",
            "out_of_order",
            "late_arrival",
            "finalization delay",
            "within out_of_order",
            "within late_arrival",
            "adjusted",
            "dropped",
        )
        for label, key in (("in force", "current"), *((f"keeps {k}", k) for k in a if k.endswith("%"))):
            s = a[key]
            assert isinstance(s, dict)
            counts = (f"{s['adjusted']:,} of {s['events']:,}", f"{s['dropped']:,}") if key == "current" else ("-", "-")
            add_row(
                rows,
                label,
                seconds(s["out_of_order"]),
                seconds(s["late_arrival"]),
                seconds(s["finalization_delay"]),
                _share(s["within_out_of_order"]),
                _share(s["within_late_arrival"]),
                *counts,
            )
        out.print(rows)


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def _share(value: object) -> str:
    return "-" if not isinstance(value, float) or math.isnan(value) else f"{value:.1%}"
