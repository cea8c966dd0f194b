"""What one signed-in user may hold of the gateway at once: requests in
progress (one beyond gets 429 with Retry-After at once) and database
connections (a request beyond waits, without a thread, for one of the user's
own slots). Without them, one tenant's parallel uploads or slow reads held
every connection of the pool and every other tenant waited behind her.

Anonymous requests (login only) are not counted here: the address throttle
and the database's per-username back-off bound them. Behind PostgREST the
database slots are `shell.request_slot` (db-pre-request)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class UserLimits:
    def __init__(self, requests_per_user: int, db_slots_per_user: int) -> None:
        self.requests_per_user = requests_per_user
        self.db_slots_per_user = db_slots_per_user
        self._requests: dict[str, int] = {}
        self._slots: dict[str, tuple[asyncio.Semaphore, int]] = {}  # semaphore, holders+waiters

    def enter(self, user: str) -> bool:
        """Counts a request of ``user`` in; False (counting nothing) if she
        already has as many in progress as she may."""
        held = self._requests.get(user, 0)
        if held >= self.requests_per_user:
            return False
        self._requests[user] = held + 1
        return True

    def leave(self, user: str) -> None:
        held = self._requests.get(user, 0) - 1
        if held > 0:
            self._requests[user] = held
        else:
            self._requests.pop(user, None)

    @contextlib.asynccontextmanager
    async def db_slot(self, user: str) -> AsyncIterator[None]:
        """One of ``user``'s database slots for the block (waiting for one if
        all are taken); the table keeps only users who hold or want one."""
        if not user:  # anonymous: bounded by the pool and the login throttles alone
            yield
            return
        semaphore, users = self._slots.get(user, (asyncio.Semaphore(self.db_slots_per_user), 0))
        self._slots[user] = (semaphore, users + 1)
        try:
            async with semaphore:
                yield
        finally:
            semaphore, users = self._slots[user]
            if users > 1:
                self._slots[user] = (semaphore, users - 1)
            else:
                del self._slots[user]
