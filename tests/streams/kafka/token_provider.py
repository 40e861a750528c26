"""An OAUTHBEARER token provider for the tests, named by its import path as a configuration
names one (an MSK IAM signer plugs in the same way)."""

from __future__ import annotations

from aiokafka.abc import AbstractTokenProvider


class StaticToken(AbstractTokenProvider):  # type: ignore[misc]
    async def token(self) -> str:
        return "a-token"
