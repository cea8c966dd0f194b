"""Login attempts per client address, in memory: a token bucket per address
that holds `per_minute` tokens and refills at that rate. It spares the
database's bcrypt work from one noisy address; the per-username back-off
that guards the accounts lives in the database (shell_api.login), where it
holds behind PostgREST too.

The table is bounded: past `max_addresses`, the addresses seen longest ago
are forgotten (they get a full bucket back, which is the cheap failure)."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable


class AddressThrottle:
    def __init__(self, per_minute: int, max_addresses: int = 100_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = float(per_minute)
        self.rate_per_s = per_minute / 60.0
        self.max_addresses = max_addresses
        self.clock = clock
        self.buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, when

    def take(self, address: str) -> float:
        """0 if ``address`` may try now (and a token is spent), else the
        seconds until it may."""
        now = self.clock()
        tokens, then = self.buckets.pop(address, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - then) * self.rate_per_s)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / self.rate_per_s
        self.buckets[address] = (tokens, now)
        while len(self.buckets) > self.max_addresses:
            self.buckets.popitem(last=False)
        return wait


def retry_after(wait_s: float) -> str:
    """Retry-After's whole seconds, rounded up (never 0 for a refusal)."""
    return str(max(1, math.ceil(wait_s)))


def try_again_in(seconds: int | str) -> str:
    """A 429's hint, as the database words it."""
    return f"Try again in {seconds} second{'' if int(seconds) == 1 else 's'}."
