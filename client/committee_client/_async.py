"""The asyncio client, :class:`AsyncClient`: the same calls as the blocking
:class:`~committee_client.Client`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from committee_client import _calls as calls
from committee_client._events import RESUMED, Event, EventReader, events_request
from committee_client._http import (
    DEFAULT_URL,
    connection_failed,
    error_of,
    headers_with_key,
    read_json,
    retry_log,
)
from committee_client._retry import DEFAULT_RETRY, Retry, retry_policy
from committee_client._stream import WINDOW, AsyncStream, stream_url
from committee_client.errors import CommitteeError, ConnectionFailed
from committee_client.types import (
    Alerts,
    ApiKey,
    AuditEntry,
    BatchItem,
    Challengers,
    Instance,
    Job,
    Label,
    Labelled,
    Learned,
    LearnerKind,
    LogImport,
    LogPage,
    Model,
    NewKey,
    Prediction,
    State,
    Stats,
)

__all__ = ["AsyncClient"]

R = TypeVar("R")


class AsyncClient:
    """An asyncio client of the Committee service; each method is a coroutine.

    Parameters
    ----------
    base_url
        The service, e.g. ``http://127.0.0.1:8000``.
    timeout
        Seconds to wait for a connection, and then for each answer.
    api_key
        The API key sent with every request and stream (``Authorization: Bearer``);
        by default the ``COMMITTEE_API_KEY`` environment variable (empty: no key).
    headers
        Headers sent with every request (e.g. for a proxy in front).
    retry
        A :class:`Retry` policy, or a number of attempts. Every call is retried after a
        failed connection, a timeout or a 503: reads are harmless to repeat, a predict
        carries its trial id and a label is applied once, and the other writes
        (``learn``, model creation and deletion, state imports) carry an
        ``Idempotency-Key``, so the service answers a retry with its first answer. A
        429 (a rate limit or quota: nothing was applied) is retried by every call, after
        its ``Retry-After`` (at most the policy's ``max_delay``).
    transport
        An httpx transport, for tests or custom networking.

    Every method raises a :class:`~committee_client.errors.CommitteeError` subclass on failure.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        timeout: float = 10.0,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        retry: Retry | int = DEFAULT_RETRY,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.headers = headers_with_key(headers, api_key)
        self.retry = retry_policy(retry)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout, headers=self.headers, transport=transport
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _run(self, call: calls.Call[R]) -> R:
        content = call.content()
        headers = call.headers()
        attempt = 0
        while True:
            attempt += 1
            error: CommitteeError
            try:
                r = await self._http.request(
                    call.method, call.path, content=content, headers=headers
                )
            except httpx.TransportError as e:
                error = connection_failed(e)
            else:
                if r.is_success:
                    return call.read(r if call.whole else read_json(r))
                error = error_of(r)
            wait = self.retry.after(error, attempt, call.idempotent) if call.retried else None
            if wait is None:
                raise error
            retry_log(call, error, attempt, self.retry.attempts, wait)
            await asyncio.sleep(wait)

    # -- service ---------------------------------------------------------------------

    async def alive(self) -> bool:
        """Whether the service process answers (``GET /healthz``); no retries, never raises."""
        try:
            await self._run(calls.alive())
        except CommitteeError:
            return False
        return True

    async def ready(self) -> bool:
        """Whether the service and its Redis answer (``GET /readyz``); no retries, never raises."""
        try:
            await self._run(calls.ready())
        except CommitteeError:
            return False
        return True

    async def learners(self) -> list[LearnerKind]:
        """Every learner kind with its parameters, defaults and allowed values."""
        return await self._run(calls.learners())

    # -- models ----------------------------------------------------------------------

    async def create_model(
        self,
        name: str,
        *,
        labels: Sequence[Label],
        learner: Mapping[str, Any] | str,
        attributes: Mapping[str, Any] | None = None,
        experts: Mapping[str, Any] | None = None,
        label_ttl: float | None = None,
    ) -> Model:
        """Create a model: its labels, its input (``attributes`` and/or ``experts``) and
        its learner (a spec, or just its kind). Raises Conflict if the name is taken."""
        return await self._run(
            calls.create_model(name, labels, learner, attributes, experts, label_ttl)
        )

    async def models(self) -> list[Model]:
        return await self._run(calls.list_models())

    async def model(self, name: str) -> Model:
        return await self._run(calls.get_model(name))

    async def delete_model(self, name: str) -> None:
        await self._run(calls.delete_model(name))

    async def state(self, name: str) -> State:
        """The learner's full state and the log version it is at."""
        return await self._run(calls.get_state(name))

    async def put_state(self, name: str, state: State | Mapping[str, Any]) -> State:
        """Replace the learner's state with one exported from a model of the same spec."""
        return await self._run(calls.put_state(name, state))

    async def fork_model(
        self,
        name: str,
        source: str,
        version: int | None = None,
        learner: Mapping[str, Any] | str | None = None,
        label_ttl: float | None = None,
    ) -> Model:
        """Make model ``name`` from ``source`` at ``version`` (None: now): its input and
        its learner's state, or another ``learner`` trained on the source's log up to
        there."""
        return await self._run(calls.fork_model(name, source, version, learner, label_ttl))

    async def rollback(self, name: str, version: int) -> Model:
        """Reset the model's learner to its state at ``version`` (an entry in its log,
        which can itself be rolled back); what it gained since stays."""
        return await self._run(calls.rollback(name, version))

    async def backtest(
        self,
        name: str,
        learner: Mapping[str, Any] | str | Sequence[Mapping[str, Any] | str],
        from_version: int | None = None,
        *,
        points: int = 100,
        wait: float | None = None,
    ) -> Job:
        """Replay the model's log through one or more candidate learners, beside the model,
        without touching it. The job, with its result when it ended within ``wait``
        seconds (the service's default when None); else running: follow it with
        :meth:`wait_job`."""
        return await self._run(calls.backtest(name, learner, from_version, points, wait))

    async def job(self, job_id: str) -> Job:
        """A job (a backtest) as it is now."""
        return await self._run(calls.job(job_id))

    async def cancel_job(self, job_id: str) -> Job:
        """Ask a running job to stop; it keeps what it computed as a partial result."""
        return await self._run(calls.cancel_job(job_id))

    async def wait_job(self, job_id: str, timeout: float = 600.0, every: float = 0.5) -> Job:
        """The job once it ended, asking every ``every`` seconds; raises
        :class:`TimeoutError` after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            job = await self.job(job_id)
            if not job.running:
                return job
            if loop.time() > deadline:
                raise TimeoutError(f"job {job_id} still runs after {timeout:g} s")
            await asyncio.sleep(every)

    async def attach_challenger(
        self, name: str, challenger: str, learner: Mapping[str, Any] | str
    ) -> Challengers:
        """Attach ``learner`` to model ``name`` as shadow challenger ``challenger``: it
        follows every trial the model learns from then on, judged on the same labels,
        never answering. The model's challengers then."""
        return await self._run(calls.attach_challenger(name, challenger, learner))

    async def alerts(self, name: str) -> Alerts:
        """The model's drift alerts, its watch's figures and its alert config."""
        return await self._run(calls.alerts(name))

    async def configure_alerts(
        self, name: str, webhook_url: str | None = None, rollback: bool = False
    ) -> Alerts:
        """Set what the model's alerts do: POST each to ``webhook_url`` (a host the
        operator allows), and with ``rollback`` roll the model back on a rise."""
        return await self._run(calls.configure_alerts(name, webhook_url, rollback))

    async def challengers(self, name: str) -> Challengers:
        """The model's challengers' figures beside its learner's on the same trials."""
        return await self._run(calls.challengers(name))

    async def promote_challenger(self, name: str, challenger: str) -> Challengers:
        """Make the challenger, as it is now, the model's learner (one entry in its log;
        a rollback to a version before undoes it)."""
        return await self._run(calls.promote_challenger(name, challenger))

    async def retire_challenger(self, name: str, challenger: str) -> None:
        """Retire the challenger: it follows the model no more."""
        await self._run(calls.retire_challenger(name, challenger))

    async def versions(self, name: str) -> dict[str, Any]:
        """The versions the model can be rebuilt at (``restorable``: from, to), its
        snapshot's, its log's bounds and its latest changes."""
        return await self._run(calls.versions(name))

    async def change_experts(
        self,
        name: str,
        add: Sequence[str] | None = None,
        retire: Sequence[str] | None = None,
    ) -> Model:
        """Add experts and retire experts of a live model; returns the model as it is
        then. A new expert enters as if it had been there from the start, silent; a
        retired one's votes are refused afterwards, and its name is never reused."""
        return await self._run(calls.change_experts(name, add, retire))

    async def add_features(self, name: str, add: Sequence[str]) -> Model:
        """Add named features to a live model (one made with ``feature_names``)."""
        return await self._run(calls.add_features(name, add))

    async def add_labels(self, name: str, add: Sequence[Label]) -> Model:
        """Add labels to a live multi-class model; predictions made before still take
        their labels."""
        return await self._run(calls.add_labels(name, add))

    async def stats(self, name: str) -> Stats:
        return await self._run(calls.stats(name))

    # -- API keys and the audit log (an admin key on every model) ---------------------

    async def create_key(
        self,
        scope: str,
        *,
        models: str = "*",
        name: str = "",
        limits: Mapping[str, float] | None = None,
    ) -> NewKey:
        """Make an API key of ``scope`` (``read``, ``write`` or ``admin``) for the models
        matching ``models``; its secret is ``.key``, shown this once. ``limits`` may set
        ``requests_per_second``, ``trials_per_second``, ``burst`` and ``max_models``."""
        return await self._run(calls.create_key(scope, models, name, limits))

    async def api_keys(self) -> list[ApiKey]:
        """Every API key, without its secret."""
        return await self._run(calls.list_keys())

    async def revoke_key(self, key_id: str) -> None:
        """Revoke a key: every worker refuses it within a second."""
        await self._run(calls.revoke_key(key_id))

    async def audit(self, limit: int = 100) -> list[AuditEntry]:
        """The newest ``limit`` entries of the audit log, newest first."""
        return await self._run(calls.audit(limit))

    # -- trials ----------------------------------------------------------------------

    async def predict(
        self,
        name: str,
        instance: Instance,
        *,
        trial_id: str | None = None,
        track: bool = True,
        explain: bool = False,
        explain_top: int | None = None,
    ) -> Prediction:
        """Predict a label. A tracked prediction waits for its label under ``trial_id``,
        made up by the client when not given, so that a retry returns the same answer.
        With ``explain``, the result's ``explanation`` gives each input's part of each
        label's score (the ``explain_top`` largest per label, the service's default when
        None); a learner kind that cannot be explained raises InvalidInput."""
        return await self._run(calls.predict(name, instance, trial_id, track, explain, explain_top))

    async def label(self, name: str, trial_id: str, label: Label) -> Labelled:
        """Give a predicted trial its true label (applied once; the same label again
        returns the same answer, a different one raises Conflict)."""
        return await self._run(calls.label(name, trial_id, label))

    async def learn(self, name: str, instance: Instance, label: Label) -> Learned:
        """Predict, judge and learn a trial whose label is known. Sent with an
        ``Idempotency-Key``, so a retry (after a timeout, say) is learned once and gets
        the first answer."""
        return await self._run(calls.learn(name, instance, label))

    async def predict_batch(
        self,
        name: str,
        instances: Iterable[Instance],
        *,
        trial_ids: Iterable[str | None] | None = None,
        track: bool = True,
        explain: bool = False,
        explain_top: int | None = None,
    ) -> list[BatchItem[Prediction]]:
        """Predict several instances with one hypothesis; one item per instance, in order
        (``explain``, ``explain_top``: as for :meth:`predict`, for every item)."""
        call = calls.predict_batch(name, instances, trial_ids, track, explain, explain_top)
        return await self._run(call)

    async def label_batch(
        self, name: str, labels: Iterable[tuple[str, Label]]
    ) -> list[BatchItem[Labelled]]:
        """Label several trials, given as (trial_id, label), in order."""
        return await self._run(calls.label_batch(name, labels))

    async def learn_batch(
        self, name: str, items: Iterable[tuple[Instance, Label]]
    ) -> list[BatchItem[Learned]]:
        """Learn several (instance, label) in order; retried like ``learn``."""
        return await self._run(calls.learn_batch(name, items))

    # -- the log: export and import ---------------------------------------------------

    async def log_page(
        self, name: str, from_version: int = 0, *, limit: int | None = None
    ) -> LogPage:
        """The entries of the model's log after version ``from_version``, at most
        ``limit`` (the service's ``max_log_entries`` when None)."""
        return await self._run(calls.log_page(name, from_version, limit))

    async def export_log(
        self, name: str, from_version: int = 0, *, to_version: int | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The model's log after ``from_version``, entry by entry (a page at a time), up
        to ``to_version`` (None: the model's version when the first page is read)."""
        after, end = from_version, to_version
        while end is None or after < end:
            page = await self.log_page(name, after)
            end = page.version if end is None else end
            for entry in page.entries():
                if entry["seq"] > end:
                    return
                yield entry
            if page.next_from == after:
                return
            after = page.next_from

    async def import_progress(self, name: str, import_id: str) -> int:
        """The line an import under ``import_id`` resumes at (1 when none was kept)."""
        return (await self._run(calls.import_progress(name, import_id))).next_line

    async def import_log(
        self,
        name: str,
        lines: Iterable[Mapping[str, Any] | str | bytes],
        *,
        import_id: str,
        first_line: int = 1,
        lines_per_request: int = 1_000,
        bytes_per_request: int = 1 << 20,
        progress: Callable[[LogImport], None] | None = None,
    ) -> LogImport:
        """Replay ``lines`` into the model, each block of 100 lines at most once under
        ``import_id`` (see :meth:`Client.import_log <committee_client.Client.import_log>`)."""
        done: LogImport | None = None
        for at, body in calls.import_requests(
            lines, first_line, lines_per_request, bytes_per_request
        ):
            got = await self._run(calls.import_lines(name, body, import_id, at))
            done = got if done is None else done.then(got)
            if progress is not None:
                progress(done)
        if done is None:
            version = (await self.model(name)).version
            return calls.nothing_imported(import_id, first_line, version)
        return done

    # -- events ----------------------------------------------------------------------

    async def events(
        self, name: str, last_event_id: int | None = None, *, every: int | None = None
    ) -> AsyncIterator[Event]:
        """The events of model ``name`` as they happen (``GET .../events``): its
        progress, changes, alerts and challengers, each with the log position it
        reflects as its ``id``; from after ``last_event_id`` when given (else from the
        model as it is now). ``every`` is the service's interval in milliseconds.

        A dropped connection, or a stream that reached its lifetime, is opened again
        with ``Last-Event-ID``: nothing is lost or given twice. The iterator ends after
        an ``end`` event for a deleted model or a revoked key (given too), and raises
        the error once ``retry.attempts`` connections failed in a row.
        """
        after = last_event_id
        attempt = 0
        while True:
            path, headers, query = events_request(name, after, every)
            error: CommitteeError
            try:
                async with self._http.stream("GET", path, headers=headers, params=query) as r:
                    if not r.is_success:
                        await r.aread()
                        error = error_of(r)
                    else:
                        reader = EventReader()
                        resumed = False
                        async for line in r.aiter_lines():
                            event = reader.line(line)
                            if event is None:
                                continue
                            attempt = 0
                            after = after if event.id is None else event.id
                            yield event
                            if event.kind == "end":
                                if event.data.get("reason") not in RESUMED:
                                    return
                                resumed = True
                                break
                        if resumed:
                            continue
                        error = ConnectionFailed("the event stream ended", sent=True)
            except httpx.TransportError as e:
                error = connection_failed(e)
            attempt += 1
            wait = self.retry.after(error, attempt, True)
            if wait is None:
                raise error
            await asyncio.sleep(wait)

    # -- stream ----------------------------------------------------------------------

    def stream(self, name: str, *, window: int = WINDOW) -> AsyncStream:
        """A WebSocket stream to model ``name``, to use as ``async with c.stream(name) as s``.

        ``window`` bounds the requests a ``*_many`` call keeps in flight. The stream is
        not retried; see :class:`~committee_client._stream.AsyncStream`.
        """
        url = stream_url(self.base_url, name)
        return AsyncStream(url, self.headers, self.timeout, window)
