"""The server's stop: told once, from a signal handler, and awaited by every response still open.

An ``asyncio.Event`` cannot be set from a signal handler and a ``threading.Event`` cannot be awaited: ``Stopping.set()``
sets each waiting loop's event with ``call_soon_threadsafe``, which also wakes the loop. Responses wait on it beside
their own work, so a stop ends them at once."""

from __future__ import annotations

import asyncio


class Stopping:
    """Set once when the server is told to stop; awaitable on any event loop, settable from any thread."""

    def __init__(self) -> None:
        self._set = False
        self._events: dict[asyncio.AbstractEventLoop, asyncio.Event] = {}  # one per loop (a test client runs its own)

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        for loop, event in list(self._events.items()):
            if not loop.is_closed():
                loop.call_soon_threadsafe(event.set)

    async def wait(self) -> None:
        loop = asyncio.get_running_loop()
        event = self._events.get(loop)
        if event is None:
            event = self._events[loop] = asyncio.Event()
            if self._set:  # told before this loop's first waiter made its event
                event.set()
        await event.wait()

    async def within(self, seconds: float) -> bool:
        """Wait ``seconds``, or less if the server is told to stop meanwhile; whether it was."""
        try:
            await asyncio.wait_for(self.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True
