"""``headrace status --advise``: from the lateness and disorder each event-time consumer type
observed, the ``out_of_order`` and ``late_arrival`` that would have kept 99 % and 99.9 % of its
events unadjusted, what each costs in finalization delay, beside the policy in force; and the
table cells ``headrace status`` and the status page share."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from rich.console import Console

from streams.adapters.status import AgentStatus, ClusterStatus, ConsumerTypeFates, consumer_type_fates, observed_by_type
from streams.cli.common import add_row, plural, table
from streams.eventtime.lateness import LARGEST, SHARES, ObservedTimes, Tolerances, advise, current


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


def observed(value: float) -> str:
    """A sampled quantile for a table cell: one at the sketch's cap is a bound, not a
    measurement (the events were at least that late).

    >>> observed(4.5), observed(LARGEST), observed(3e7)
    ('4.50 s', 'over 1,000,000 s', 'over 1,000,000 s')
    """
    return f"over {seconds(LARGEST)}" if value >= LARGEST else seconds(value)


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

    @property
    def warning(self) -> str | None:
        """What the advice is worth when too few events were sampled for its shares (about
        ten beyond each share's quantile: :func:`samples_needed`), else None.

        A quantile of the tail from a handful of samples is a guess: 15 samples say
        nothing of the one event in a hundred that out_of_order must keep.
        """
        short = [(share, samples_needed(share)) for share in self.advised]
        short = [(share, n) for share, n in short if self.sampled < n]
        if not short:
            return None
        needs = ", ".join(f"keeps {share} about {n:,}" for share, n in short)
        more = (
            "wait for more events"
            if self.every == 1
            else f"sample more with [agent] lateness_sample_every = 1 (now 1 in {self.every:,}), or wait for more events"
        )
        return (
            f"only {plural(self.sampled, 'sampled event')}, too few for the tails ({needs} needed): "
            f"these settings are guesses; {more}"
        )

    def as_dict(self) -> dict[str, object]:
        """The ``--advise --json`` object of the type."""
        fates = asdict(self.fates)
        del fates["consumer_type"]
        return {
            "sampled": self.sampled,
            "warning": self.warning,
            "every": self.every,
            "lateness": self.lateness,
            "disorder": self.disorder,
            "current": {**asdict(self.current), **fates},
            **{share: asdict(setting) for share, setting in self.advised.items()},
        }


def samples_needed(share: str) -> int:
    """How many sampled events an advice keeping ``share`` ("99%") needs to mean something:
    about ten beyond its quantile.

    >>> samples_needed("99%"), samples_needed("99.9%")
    (1000, 10000)
    """
    return round(10 / (1 - float(share.rstrip("%")) / 100))


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
            advised = seconds if label == "in force" else observed  # an advised one is a quantile
            add_row(
                rows,
                label,
                advised(setting.out_of_order),
                seconds(setting.late_arrival) if setting.late_arrival is None else advised(setting.late_arrival),
                seconds(setting.finalization_delay),
                _share(setting.within_out_of_order),
                _share(setting.within_late_arrival),
                *counts,
            )
        out.print(rows)
        if a.warning is not None:
            out.print(f"warning: {a.warning}", highlight=False)


def _share(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1%}"
