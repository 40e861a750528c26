"""The application the status page's browser test runs with ``headrace worker``: its provider
and ordering policy come from the configuration (``HEADRACE_CONFIG``). ``readings`` streams
are taken in event time (the policy's refusals become dead letters, as in ``status_app``); a
``stuck`` stream's consumer never finishes its first batch (as in ``rates_app``), so its
queue falls behind."""

from __future__ import annotations

from tests.streams.cli.rates_app import Stuck
from tests.streams.cli.status_app import InTimestampOrder, config

provider = config.provider()
provider.implicit("readings")(InTimestampOrder)
provider.implicit("stuck")(Stuck)
