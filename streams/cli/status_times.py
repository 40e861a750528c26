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
from dataclasses import asdict, dataclass

from rich.console import Console

from streams.cli.common import add_row, plural, table
from streams.eventtime.advice import SHARES, Tolerances, advise, current
from streams.eventtime.lateness import ObservedTimes
from streams.runtime.status import (
    AgentStatus,
    ClusterStatus,
    ConsumerTypeFates,
    consumer_type_fates,
    observed_by_type,
)


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


@dataclass(frozen=True, slots=True)
class Setting:
    """A row of ``--advise``: tolerances (``late_arrival`` None: off), their finalization
    delay, and the share of the sampled events certainly within each."""

    out_of_order: float
    late_arrival: float | None
    finalization_delay: float
    within_out_of_order: float
    within_late_arrival: float

    @classmethod
    def of(cls, seen: ObservedTimes, t: Tolerances) -> Setting:
        return cls(
            t.out_of_order,
            t.late_arrival,
            t.delay,
            seen.share_within("disorder", t.out_of_order),
            seen.share_within("lateness", t.late_arrival),
        )


@dataclass(frozen=True, slots=True)
class TypeAdvice:
    """``--advise`` for one consumer type: what was sampled (quantiles by ``p50``, ``p99``,
    ``p99.9``), the policy in force with what it did, and a setting per share kept
    (``"99%"``, ``"99.9%"``)."""

    consumer_type: str
    sampled: int
    every: int
    lateness: dict[str, float]
    disorder: dict[str, float]
    current: Setting
    fates: ConsumerTypeFates
    advised: dict[str, Setting]

    def as_dict(self) -> dict[str, object]:
        """The ``--advise --json`` object of the type."""
        fates = asdict(self.fates)
        del fates["consumer_type"]
        return {
            "sampled": self.sampled,
            "every": self.every,
            "lateness": self.lateness,
            "disorder": self.disorder,
            "current": {**asdict(self.current), **fates},
            **{share: asdict(setting) for share, setting in self.advised.items()},
        }


def advice_of(status: ClusterStatus) -> list[TypeAdvice]:
    """Per consumer type with events sampled: what was observed, the policy in force with
    its fates, and the advised tolerances, by type name."""
    agents = reported_agents(status)
    fates = {t.consumer_type: t for t in consumer_type_fates(agents)}
    found = []
    labels = ("p50", "p99", "p99.9")
    for name, seen in observed_by_type(agents).items():
        if not seen.samples:
            continue
        found.append(
            TypeAdvice(
                name,
                seen.samples,
                seen.every,
                dict(zip(labels, seen.quantiles("lateness"))),
                dict(zip(labels, seen.quantiles("disorder"))),
                Setting.of(seen, current(seen)),
                fates.get(name, ConsumerTypeFates(name, 0, 0, 0, 0)),
                {f"{share:.1%}".replace(".0%", "%"): Setting.of(seen, advise(seen, share)) for share in SHARES},
            )
        )
    return found


def render_advice(advice: list[TypeAdvice], out: Console) -> None:
    """One table per consumer type: the policy in force, then each advised setting."""
    for a in advice:
        rows = table(
            f"{a.consumer_type}: tolerances from {plural(a.sampled, 'sampled event')} of the last hour "
            f"(1 in {a.every:,})",
            "setting",
            "out_of_order",
            "late_arrival",
            "finalization delay",
            "within out_of_order",
            "within late_arrival",
            "adjusted",
            "dropped",
        )
        done = (f"{a.fates.adjusted:,} of {a.fates.events:,}", f"{a.fates.dropped:,}")
        for label, setting, counts in (
            ("in force", a.current, done),
            *((f"keeps {share}", s, ("-", "-")) for share, s in a.advised.items()),
        ):
            add_row(
                rows,
                label,
                seconds(setting.out_of_order),
                seconds(setting.late_arrival),
                seconds(setting.finalization_delay),
                _share(setting.within_out_of_order),
                _share(setting.within_late_arrival),
                *counts,
            )
        out.print(rows)


def _share(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1%}"
