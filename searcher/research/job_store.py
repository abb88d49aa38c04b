"""Background jobs (research, crawl) in the state store (the SQLite file, or Redis): each
job's record and events written where every worker and replica reads them, the heartbeat
that says this process is alive, and the reading side — another process's job looked up,
streamed, and marked ``failed: interrupted`` once its owner stopped beating
(``research/job_runner.py`` runs the jobs and decides what is written when).

A store that cannot be reached is no death: nothing is said of other processes' jobs then
(the store raises), and nobody is marked interrupted until this process has seen the store
answer for longer than ``owner_ttl_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from searcher.config import ResearchSettings
from searcher.contract import JobEvent, JobStatus, JobView
from searcher.errors import JobNotFound, StateUnavailable
from searcher.state.base import StateStore, get_json, set_json
from searcher.state.failsoft import FailSoftStore

FINISHED: frozenset[JobStatus] = frozenset({"done", "failed", "cancelled"})
NAMESPACE = "research:"  # research jobs' keys; other kinds of job have their own
INTERRUPTED = "interrupted: the server running the job stopped"
EXPIRED = "expired: the job's record is gone from the state store"
POLL_S = 0.25  # how often a stream of another process's job looks for new events
# A finished job's events outlive its record by this much: whoever can read the job can
# stream all of it.
EVENTS_OUTLIVE_S = 5.0


def now_utc() -> str:
    """The time now as the job's views and events show it (ISO 8601, ms, ``Z``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


V = TypeVar("V", bound=JobView)
E = TypeVar("E", bound=JobEvent)


@dataclass(frozen=True)
class Record(Generic[V]):
    """A job as the state store holds it: its view, the process running it, and the
    lifetime of its record and events while it runs."""

    view: V
    owner: str
    ttl_s: float
    key: str | None = None  # the API key that started it (its id); None: anonymous


@dataclass(frozen=True)
class JobKind(Generic[V, E]):
    """What tells one kind of job from another: its name (``research``, ``crawl``: its
    keys' namespace in the store, and what errors call it) and the models of its view and
    events."""

    what: str
    view_type: type[V]
    event_type: type[E]

    @property
    def namespace(self) -> str:
        """The prefix of its keys in the store."""
        return f"{self.what}:"


class JobStore(Generic[V, E]):
    """One kind of job's side of the state store, for the process ``owner``. ``store``
    None: jobs live in their process only, and every write here is a no-op."""

    def __init__(
        self,
        store: FailSoftStore | None,
        settings: ResearchSettings,
        owner: str,
        kind: JobKind[V, E],
    ) -> None:
        self._settings = settings
        self._kind = kind
        # Jobs must tell an absent record from a store that cannot be reached (a worker
        # that read "absent" during an outage marked other workers' jobs interrupted).
        self._watched = store
        self._store: StateStore | None = store.strict if store is not None else None
        self.owner = owner
        self._heart: asyncio.Task[None] | None = None
        self._watching_since: float | None = None  # monotonic: when the heartbeat began
        self.closing = False  # set when the process stops: no heartbeat starts any more

    @property
    def shared(self) -> bool:
        """Whether there is a store (jobs are visible to other processes)."""
        return self._store is not None

    def key(self, kind: str, *parts: str | int) -> str:
        """The store key of one kind of a job's entries (``job``, ``event``, ...)."""
        return self._kind.namespace + ":".join([kind, *(str(p) for p in parts)])

    # --- the heartbeat ------------------------------------------------------------------

    async def start_heart(self) -> None:
        """Beat from this process's first look at the store on: the beats tell other
        processes it is alive, and keep this one watching the store (``_may_interrupt``)."""
        if self._store is None or self._heart is not None or self.closing:
            return
        self._watching_since = time.monotonic()
        await self._beat()
        self._heart = asyncio.create_task(self._keep_beating(), name="research-heartbeat")

    async def stop_heart(self) -> None:
        """Stop beating, and say so (other processes see this one's jobs end at once)."""
        if self._heart is None:
            return
        self._heart.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._heart
        if self._store is not None:
            await written(self._store.delete(self.key("alive", self.owner)))

    async def _beat(self) -> None:
        if self._store is not None:
            alive = self._store.set(self.key("alive", self.owner), b"1", self._settings.owner_ttl_s)
            await written(alive)

    async def _keep_beating(self) -> None:
        while True:
            await asyncio.sleep(self._settings.owner_ttl_s / 3)
            await self._beat()

    def _may_interrupt(self) -> bool:
        """Whether an absent heartbeat means a dead owner. Only once this process has seen
        the store answer for longer than ``owner_ttl_s`` (its own beats, a third of that
        apart, would have seen an outage long enough to expire a heartbeat): right after an
        outage a live owner may not have beaten again yet."""
        if self._watched is None or self._watching_since is None:
            return False
        watched_s = time.monotonic() - self._watching_since
        return min(watched_s, self._watched.up_for()) > self._settings.owner_ttl_s

    # --- writing ------------------------------------------------------------------------

    async def save_record(self, record: Record[V]) -> None:
        """A job's record; once it is finished, for ``retention_s`` from now."""
        if self._store is None:
            return
        raw = {"owner": record.owner, "key": record.key,
               "view": record.view.model_dump(mode="json"), "ttl_s": record.ttl_s}  # fmt: skip
        finished = record.view.status in FINISHED
        ttl = self._settings.retention_s if finished else record.ttl_s
        await set_json(self._store, self.key("job", record.view.id), raw, ttl)

    async def save_event(self, job_id: str, event: E, ttl_s: float) -> None:
        """One event of a job, living ``ttl_s``."""
        if self._store is not None:
            key = self.key("event", job_id, event.id)
            await set_json(self._store, key, event.model_dump(mode="json"), ttl_s)

    def finished_event_ttl(self) -> float:
        """How long a finished job's events live: its record's lifetime and a little."""
        return self._settings.retention_s + EVENTS_OUTLIVE_S

    async def ask_cancel(self, record: Record[V]) -> None:
        """Ask the process running a job to stop it (it looks at its next event)."""
        if record.view.status not in FINISHED and self._store is not None:
            await self._store.set(self.key("cancel", record.view.id), b"1", record.ttl_s)

    async def cancel_asked(self, job_id: str) -> bool:
        """Whether a DELETE reached another process (it leaves a key in the store)."""
        if self._store is None:
            return False
        try:
            return bool(await self._store.get(self.key("cancel", job_id)))
        except StateUnavailable:
            return False  # asked again at its next event

    # --- reading ------------------------------------------------------------------------

    async def stored_event(self, job_id: str, n: int) -> E | None:
        """Event ``n`` of a job from the store (None if absent, expired or corrupt)."""
        raw = await get_json(self._store, self.key("event", job_id, n)) if self._store else None
        try:
            return self._kind.event_type.model_validate(raw) if raw is not None else None
        except ValueError:
            return None

    async def stored(self, job_id: str, key: str | None) -> Record[V]:
        """A job of ``key`` from the store; one whose owner stopped beating is
        ``interrupted`` (``_may_interrupt``). Another key's job is not found, as an unknown
        one. ``StateUnavailable`` when the store cannot be reached: nothing can be said."""
        raw = await get_json(self._store, self.key("job", job_id)) if self._store else None
        if not isinstance(raw, dict) or raw.get("key") != key:
            raise JobNotFound(job_id, self._kind.what)
        try:
            view = self._kind.view_type.model_validate(raw["view"])
            ttl_s = float(raw.get("ttl_s", self._settings.retention_s))
        except (KeyError, TypeError, ValueError) as exc:
            raise JobNotFound(job_id, self._kind.what) from exc
        record = Record(view, str(raw.get("owner")), ttl_s, key)
        if view.status in FINISHED or self._store is None:
            return record
        if await self._store.get(self.key("alive", record.owner)) is not None:
            return record
        if not self._may_interrupt():
            return record  # as its owner last wrote it: the owner may be about to beat
        return await self._interrupt(record)

    async def _keep_events(self, job_id: str, count: int) -> int:
        """Give a finished job's stored events its record's lifetime (plus a little);
        returns the id of its last stored event, which may be beyond ``count``: the
        record is saved after the event, and a process can die between the two."""
        ttl = self.finished_event_ttl()
        last = 0
        for n in range(1, count + 1):
            event = await self.stored_event(job_id, n)
            if event is not None:
                await self.save_event(job_id, event, ttl)
                last = n
        while (event := await self.stored_event(job_id, max(last, count) + 1)) is not None:
            await self.save_event(job_id, event, ttl)
            last = event.id
        return max(last, count)

    async def _interrupt(self, record: Record[V]) -> Record[V]:
        """Mark a job whose process died as failed; the first reader to see it writes the
        last events (a counter decides who, so they are written once)."""
        assert self._store is not None
        view = record.view
        failed = view.model_copy(update={"status": "failed", "error": INTERRUPTED,
                                         "error_kind": "interrupted",
                                         "updated_utc": now_utc()})  # fmt: skip
        if await self._store.incr(self.key("interrupt", view.id), 1, record.ttl_s) == 1:
            last_id = await self._keep_events(view.id, view.events)
            last: list[tuple[str, dict[str, Any]]] = [
                ("error", {"status": "failed", "message": INTERRUPTED}),
                ("done", {"status": "failed"}),
            ]
            for n, (kind, data) in enumerate(last, start=last_id + 1):
                event = self._kind.event_type(id=n, type=kind, ts=now_utc(), data=data)
                await self.save_event(view.id, event, self.finished_event_ttl())
            failed = failed.model_copy(update={"events": last_id + 2})
            await self.save_record(Record(failed, record.owner, record.ttl_s, record.key))
        else:
            failed = failed.model_copy(update={"events": view.events + 2})
        return Record(failed, record.owner, record.ttl_s, record.key)

    async def follow(
        self,
        job_id: str,
        after: int,
        heartbeat_s: float | None,
        seen: V | None,
        key: str | None,
    ) -> AsyncIterator[E | None]:
        """Another process's job: its stored events, polled until its last one. The
        stream always ends cleanly: events no longer stored are skipped, and the job's
        ``error`` and ``done`` events rebuilt from its record if they are gone too."""
        if seen is not None and seen.id == job_id:
            view = seen
        else:
            try:
                view = (await self.stored(job_id, key)).view
            except JobNotFound:
                return  # expired just now: nothing to stream
        sent, quiet = await self._start_after(job_id, view, after), 0.0
        while True:
            # While the store is away nothing is known: the stream waits (keep-alives),
            # neither ending the job nor skipping its events.
            away = False
            try:
                event = await self.stored_event(job_id, sent + 1)
            except StateUnavailable:
                event, away = None, True
            if event is not None:
                sent, quiet = event.id, 0.0
                yield event
                continue
            if view.status in FINISHED and not away:
                async for event in self._rest_of(job_id, view, sent):
                    yield event
                return
            await asyncio.sleep(POLL_S)
            quiet += POLL_S
            if heartbeat_s is not None and quiet >= heartbeat_s:
                quiet = 0.0
                yield None
            try:
                view = (await self.stored(job_id, key)).view
            except StateUnavailable:
                continue
            except JobNotFound:  # its process died and nobody read it for its lifetime
                gone = view.model_copy(update={"status": "failed", "error": EXPIRED,
                                               "events": max(view.events, sent) + 2})  # fmt: skip
                for event in last_events(gone, sent, self._kind.event_type):
                    yield event
                return

    async def _start_after(self, job_id: str, view: V, after: int) -> int:
        """Where a stream of a stored job starts: ``after``, or for a running job, at
        most its last event so far (so that the stream still ends with its ``done``)."""
        sent = max(0, after)
        if view.status in FINISHED or sent <= view.events:
            return sent
        last = view.events  # events are saved before the record that counts them
        with contextlib.suppress(StateUnavailable):  # then from the last one counted
            while last < sent and await self.stored_event(job_id, last + 1) is not None:
                last += 1
        return last

    async def _rest_of(self, job_id: str, view: V, sent: int) -> AsyncIterator[E]:
        """A finished job's events after ``sent`` once one is missing from the store:
        those still stored, then its last events rebuilt if they are gone."""
        for n in range(sent + 1, view.events + 1):
            try:
                event = await self.stored_event(job_id, n)
            except StateUnavailable:  # gone with the store: as if evicted
                event = None
            if event is not None:
                sent = n
                yield event
        for event in last_events(view, sent, self._kind.event_type):
            yield event


def last_events(view: JobView, sent: int, event_type: type[E]) -> list[E]:
    """A finished job's last events rebuilt from its record (for a stream whose stored
    events are gone): its ``error`` when it did not succeed, then its ``done``, with the
    ids they had, those after ``sent``."""
    last: list[tuple[str, dict[str, Any]]] = [("done", {"status": view.status})]
    if view.status != "done":
        message = view.error or view.status
        last.insert(0, ("error", {"status": view.status, "message": message}))
    first = view.events - len(last) + 1
    return [
        event_type(id=n, type=kind, ts=view.updated_utc, data=data)
        for n, (kind, data) in enumerate(last, start=first)
        if n > sent
    ]


async def written(write: Awaitable[object]) -> bool:
    """Run a store write whose loss the job survives; False if the store was away."""
    try:
        await write
    except StateUnavailable:
        return False
    return True
