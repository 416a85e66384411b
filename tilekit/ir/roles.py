"""Warp roles side by side: the producer and consumer of a warp-specialized pipeline run as
threads that take turns, over one ``ProtocolState``.

Two clients run ``warp_roles`` with it: the interpreter (with data) and the protocol checker
(``tilekit.sched.protocol``, without). Each gives a context (``RoleContext``) that runs a
block for one role, and calls ``RoleScheduler.block`` when a wait of that role cannot go on
yet; a deadlock (every unfinished role waiting, nothing changed since) is raised as
``RoleDeadlock``, which each client reports its own way.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

from tilekit.ir.async_protocol import ProtocolState, WouldBlock
from tilekit.ir.core import Block, Operation


class RoleContext(Protocol):
    """What the scheduler needs of the context that runs one role."""

    role: str
    roles: RoleScheduler | None

    @property
    def protocol(self) -> ProtocolState: ...

    def child(self, role: str) -> RoleContext: ...

    def run_block(self, block: Block, args: Sequence[Any]) -> list[Any]: ...


class RoleDeadlock(Exception):
    """Every unfinished role waits on a phase that nothing can complete any more."""

    def __init__(self, blocked: list[tuple[str, Operation, WouldBlock]]) -> None:
        super().__init__(self.describe(blocked))
        self.blocked = blocked

    @staticmethod
    def describe(blocked: list[tuple[str, Operation, WouldBlock]]) -> str:
        return "; ".join(f"role `{r}` at `{op.name}` ({op.loc.short if op.loc else '?'}) "
                         f"on {exc.what}" for r, op, exc in blocked)


class _Unwind(Exception):
    """Raised in a blocked role's thread to end it once a deadlock is found."""


class RoleScheduler:
    """Warp roles as threads that take turns: exactly one runs at a time, and it runs until
    it finishes or waits on a phase that has not completed, then hands the turn to the next
    role (in order) that can go on: a ready one, or a waiting one whose protocol changed
    since it blocked. Deterministic, and a deadlock (every unfinished role waiting, nothing
    changed since) is found, not timed out.

    The roles start knowing what the parent's threads know, and the parent goes on knowing
    what every role knows (``ProtocolState.enter_roles`` / ``leave_roles``)."""

    def __init__(self, op: Operation) -> None:
        self.op = op
        self.names: list[str] = []
        self.wake: dict[str, threading.Semaphore] = {}
        self.finished = threading.Event()
        self.version = 0
        self.state: dict[str, str] = {}  # role -> ready | blocked | done
        self.blocked_at: dict[str, tuple[int, Operation, WouldBlock]] = {}
        self.results: dict[str, list[Any]] = {}
        self.error: BaseException | None = None
        self.deadlock = False

    def _bump(self) -> None:
        self.version += 1

    def run(self, parent: RoleContext, roles: list[tuple[str, Block, list[Any]]]) -> list:
        """Run each ``(name, block, args)`` as a role; their yields, in order."""
        protocol = parent.protocol
        previous = protocol.on_change
        protocol.on_change = self._bump
        self.names = [name for name, _, _ in roles]
        protocol.enter_roles(parent.role, self.names)
        threads = []
        for name, block, args in roles:
            ctx = parent.child(name)
            ctx.roles = self
            self.state[name] = "ready"
            self.wake[name] = threading.Semaphore(0)
            threads.append(threading.Thread(target=self._main, args=(ctx, block, args),
                                            daemon=True))
        try:
            for t in threads:
                t.start()
            self.wake[self.names[0]].release()
            self.finished.wait()
            for t in threads:
                t.join()
        finally:
            protocol.on_change = previous
        if self.error is not None:
            raise self.error
        if self.deadlock:
            raise RoleDeadlock([(r, op, exc) for r, (_, op, exc) in self.blocked_at.items()
                                if self.state[r] == "blocked"])
        protocol.leave_roles(parent.role, self.names)
        return [self.results[name] for name in self.names]

    def _next(self, after: str) -> str | None:
        """The role to run after ``after``: the next one in order that can go on."""
        k = self.names.index(after)
        for r in self.names[k + 1:] + self.names[:k + 1]:
            state = self.state[r]
            if state == "ready" or (state == "blocked" and self.blocked_at[r][0] != self.version):
                return r
        return None

    def _hand_over(self, role: str) -> None:
        """``role`` stops running: wake the next role, or end the run (done, deadlock)."""
        nxt = self._next(role) if self.error is None else None
        if nxt is not None:
            self.wake[nxt].release()
            return
        if self.error is None and any(v != "done" for v in self.state.values()):
            self.deadlock = True
        for r in self.names:
            if self.state[r] != "done":
                self.wake[r].release()  # to unwind (or not start)
        self.finished.set()

    def _main(self, ctx: RoleContext, block: Block, args: list[Any]) -> None:
        role = ctx.role
        self.wake[role].acquire()
        if self.deadlock or self.error is not None:
            return
        try:
            self.results[role] = ctx.run_block(block, args)
            self.state[role] = "done"
        except _Unwind:
            return
        except BaseException as exc:  # noqa: BLE001  (re-raised by run())
            self.error = exc
            self.state[role] = "done"
        self._hand_over(role)

    def block(self, ctx: RoleContext, op: Operation, exc: WouldBlock) -> None:
        """Called by a role whose wait cannot go on: hand over the turn and sleep until it
        comes back (or raise ``_Unwind`` to end the role when the run is over)."""
        role = ctx.role
        self.state[role] = "blocked"
        self.blocked_at[role] = (self.version, op, exc)
        self._hand_over(role)
        self.wake[role].acquire()
        if self.deadlock or self.error is not None:
            raise _Unwind
        self.state[role] = "ready"
