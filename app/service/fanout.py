"""Fan-out: the service asks the deployed classifiers for their votes itself.

An expert of ``input.experts`` may name an endpoint where its classifier runs::

    "experts": {"expert_names": ["lr", "tree", "svc"], "normalize": "raw",
                "deadline_ms": 150,
                "endpoints": {"lr": {"url": "http://10.0.0.7:8080", "protocol": "v2",
                                     "model": "iris-lr", "output": "predict_proba"},
                              "svc": {"url": "http://svc.ml.svc.cluster.local/score",
                                      "protocol": "json", "output": "/scores",
                                      "headers_secret": "svc"}}}

The input space keeps these members as they came (:data:`models.inputs.space.OPAQUE_EXPERTS`):
the learners know nothing of HTTP. They are read here, by :func:`read_plan`, when a model
is created (a 422 naming the member, ``input.experts.endpoints.<expert>.url`` say) and
when a worker first fans a model's predict out.

A predict with ``inputs`` (:meth:`Fanout.votes`) sends them to every endpoint at once and
waits at most the model's ``deadline_ms``; an answer that is late, failed or malformed is
the expert's abstention, which votes already allow. Protocols:

``v2``
    The Open Inference Protocol (KServe v2, MLServer, Triton): ``POST
    {url}/v2/models/{model}/infer`` with one FP64 tensor of shape ``[rows, n]``; the
    answer's output tensor (``output``, else the first) holds each row's scores in the
    classifier's class order: the model's label order, or ``classes`` (the model's label
    for each of the classifier's classes, null for one it has not). Concurrent predicts
    of a worker are sent as one request of several rows (up to ``fanout_max_batch``).
``json``
    ``POST {url}`` with ``inputs`` as the JSON body; the answer's member at the JSON
    pointer ``output`` (RFC 6901, "" the whole answer) is ``{label: score}`` or a list
    of scores as ``v2``'s rows are read.

Scores are finite numbers, not below zero; anything else is a malformed answer.

Safety. An endpoint's host must match one of ``allowed_endpoints`` (host globs, none by
default), at creation and at each call; redirects are never followed; an answer is read
up to ``fanout_max_answer_bytes``; request headers come only from the named secret of
``endpoint_secrets``, never from a request. Requests in flight to one endpoint are
limited (``fanout_concurrency``) and a circuit breaker per endpoint stops calling one that
failed ``fanout_breaker_failures`` times in a row, until a probe after
``fanout_breaker_cooldown_ms`` succeeds.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import re
import time
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
from prometheus_client import Counter, Gauge, Histogram

from app.core.errors import BadInput
from app.core.settings import Settings
from app.service.gather import Gathers
from models.core.learner import UnknownLabel
from models.inputs.space import InputSpace

__all__ = [
    "BREAKER_STATE",
    "EXPERT_OUTCOMES",
    "EXPERT_SECONDS",
    "Breaker",
    "Endpoint",
    "Fanout",
    "Plan",
    "allowed",
    "check_plan",
    "read_plan",
]

PROTOCOLS = ("v2", "json")
MEMBERS = ("url", "protocol", "model", "input", "output", "timeout_ms", "headers_secret", "classes")
MAX_URL = 2048
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")
_TENSOR_NAME = re.compile(r"^[A-Za-z0-9_.:/-]{1,256}$")
MAX_ROW = 1 << 20  # numbers in one v2 row of inputs
PLANS_MOST = 4096  # models whose plans a worker keeps read

# per expert, per model: this worker's answers by outcome, and how long the usable ones took
EXPERT_OUTCOMES = Counter(
    "committee_fanout_answers",
    "answers of experts' endpoints by outcome (ok, timeout, error, malformed, late, open, refused)",
    ["model", "expert", "outcome"],
)
EXPERT_SECONDS = Histogram(
    "committee_fanout_seconds",
    "seconds an expert's endpoint took to give a usable answer",
    ["model", "expert"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
)
BREAKER_STATE = Gauge(
    "committee_fanout_breaker",
    "an endpoint's circuit breaker: 0 closed, 1 half-open (probing), 2 open",
    ["endpoint"],
    multiprocess_mode="livemax",
)
CLOSED, HALF_OPEN, OPEN = 0, 1, 2
STATES = ("closed", "half-open", "open")  # by state, as :meth:`Fanout.health` names them
RECENT = 100  # answers of an expert's endpoint whose outcomes a worker keeps, the latest
OUTCOMES = ("ok", "timeout", "error", "malformed", "late", "open", "refused")


# -- the plan: what a model's config says ----------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """Where and how to ask: the part of an endpoint's config that makes the request
    (several models' experts calling alike share its batches, its limit and its breaker)."""

    protocol: str
    target: str  # the URL posted to
    output: str  # v2: the output tensor's name ("" the first); json: a JSON pointer
    input: str  # v2: the input tensor's name
    timeout_ms: int
    headers_secret: str | None


@dataclass(frozen=True)
class Asked:
    """An expert's endpoint and the model's class of each of its classifier's classes
    (None: in the model's label order; an entry None: a class the model has not)."""

    endpoint: Endpoint | None
    classes: tuple[int | None, ...] | None
    refused: BadInput | None = None  # why this endpoint is not called (settings changed)


@dataclass(frozen=True)
class Plan:
    deadline_ms: int
    experts: dict[str, Asked]


def _glob(pattern: str) -> re.Pattern[str]:
    """``*`` and ``?`` as wildcards, everything else (brackets of IPv6 too) literally."""
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower())
    return re.compile("".join(parts) + r"\Z")


def allowed(url: str, globs: Sequence[str]) -> bool:
    """Whether ``url``'s host (and port) matches one of the host globs: ``host`` (any
    port), ``host:port``, ``[v6]`` or ``[v6]:port``."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return False
    if not host:
        return False
    port = port or (443 if parts.scheme == "https" else 80)
    shown = f"[{host}]" if ":" in host else host
    for g in globs:
        with_port = g.rsplit("]", 1)[-1].count(":") == 1 if g.startswith("[") else ":" in g
        if _glob(g).match(f"{shown}:{port}" if with_port else shown):
            return True
    return False


def _url(value: Any, field: str, settings: Settings) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_URL:
        raise BadInput(field, f"expected an http(s) URL of at most {MAX_URL} characters")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (a port beyond 65535 is a ValueError)
    except ValueError as e:
        raise BadInput(field, f"{value[:200]!r}: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(field, f"{value[:200]!r}: expected an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise BadInput(field, "credentials in the URL: name a headers_secret instead")
    if parts.fragment:
        raise BadInput(field, f"{value[:200]!r}: expected no fragment")
    if not allowed(value, settings.allowed_endpoints):
        globs = ", ".join(settings.allowed_endpoints) or "none (COMMITTEE_ALLOWED_ENDPOINTS)"
        raise BadInput(field, f"host {parts.netloc!r} is not an allowed endpoint: allowed {globs}")
    return value


def _int(value: Any, field: str, low: int, high: int, setting: str) -> int:
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int or not low <= value <= high:
        raise BadInput(field, f"{value!r}: expected an integer from {low} to {high} ({setting})")
    return value


def _classes(value: Any, field: str, space: InputSpace) -> tuple[int | None, ...]:
    if not isinstance(value, list) or not 0 < len(value) <= 65_536:
        raise BadInput(field, "expected a list: the model's label for each class, or null")
    out: list[int | None] = []
    for j, label in enumerate(value):
        try:
            c = None if label is None else space.class_of(label)
        except UnknownLabel:
            raise BadInput(
                f"{field}.{j}", f"{label!r}: expected one of the model's labels"
            ) from None
        if c is not None and c in out:
            raise BadInput(f"{field}.{j}", f"{label!r}: listed twice")
        out.append(c)
    return tuple(out)


def _endpoint(doc: Any, field: str, space: InputSpace, settings: Settings, deadline: int) -> Asked:
    if not isinstance(doc, dict):
        raise BadInput(field, "expected an object {url, protocol, model, output, ...}")
    for key in doc:
        if key not in MEMBERS:
            raise BadInput(f"{field}.{key}", f"unknown member: expected one of {list(MEMBERS)}")
    protocol = doc.get("protocol", "v2")
    if protocol not in PROTOCOLS:
        raise BadInput(f"{field}.protocol", f"{protocol!r}: expected one of {list(PROTOCOLS)}")
    url = _url(doc.get("url"), f"{field}.url", settings)
    most = settings.fanout_max_deadline_ms
    timeout = _int(
        doc.get("timeout_ms", deadline), f"{field}.timeout_ms", 1, most, "fanout_max_deadline_ms"
    )
    secret = doc.get("headers_secret")
    if secret is not None and secret not in settings.endpoint_secrets:
        raise BadInput(
            f"{field}.headers_secret", f"{str(secret)[:100]!r}: no such secret (endpoint_secrets)"
        )
    output = doc.get("output")
    model = doc.get("model")
    tensor = doc.get("input", "input-0")
    if protocol == "v2":
        if not isinstance(model, str) or not _MODEL_NAME.match(model):
            raise BadInput(
                f"{field}.model", f"{model!r}: expected a model name, {_MODEL_NAME.pattern}"
            )
        for key, v in (("output", output or ""), ("input", tensor)):
            if not isinstance(v, str) or (v and not _TENSOR_NAME.match(v)):
                raise BadInput(f"{field}.{key}", f"{v!r}: expected a tensor name")
        split = urlsplit(url)
        if split.query:
            raise BadInput(f"{field}.url", "a v2 endpoint's URL is its base: expected no query")
        target = url.rstrip("/") + f"/v2/models/{model}/infer"
    else:
        for key in ("model", "input"):
            if key in doc:
                raise BadInput(f"{field}.{key}", "a json endpoint takes no such member")
        if output is not None and (not isinstance(output, str) or output[:1] not in ("", "/")):
            raise BadInput(f"{field}.output", f"{output!r}: expected a JSON pointer ('' or '/...')")
        target = url
    classes = doc.get("classes")
    return Asked(
        Endpoint(protocol, target, output or "", tensor, timeout, secret),
        None if classes is None else _classes(classes, f"{field}.classes", space),
    )


def read_plan(space: InputSpace, settings: Settings) -> Plan | None:
    """The endpoints of ``space``'s experts (None: it has none), each one that cannot be
    called now refused (:attr:`Asked.refused`): :func:`check_plan` raises that instead."""
    section = space.experts or {}
    endpoints = section.get("endpoints")
    if endpoints is None and section.get("deadline_ms") is None:
        return None
    base = "input.experts"
    deadline = _int(
        section.get("deadline_ms", settings.fanout_deadline_ms),
        f"{base}.deadline_ms",
        1,
        settings.fanout_max_deadline_ms,
        "fanout_max_deadline_ms",
    )
    if endpoints is None:
        endpoints = {}
    if not isinstance(endpoints, dict):
        raise BadInput(f"{base}.endpoints", "expected an object: expert name -> endpoint")
    experts: dict[str, Asked] = {}
    for name, doc in endpoints.items():
        field = f"{base}.endpoints.{name}"
        if name not in space.expert_names:
            raise BadInput(field, f"{name!r} is not one of expert_names")
        try:
            experts[name] = _endpoint(doc, field, space, settings, deadline)
        except BadInput as e:
            experts[name] = Asked(None, None, e)
    return Plan(deadline, experts)


def check_plan(space: InputSpace, settings: Settings, only: Collection[str] | None = None) -> None:
    """Refuse a model config whose endpoints cannot all be called (or those of the
    experts ``only`` names): a :class:`~app.core.errors.BadInput` naming the member."""
    plan = read_plan(space, settings)
    for expert, asked in (plan.experts if plan else {}).items():
        if asked.refused is not None and (only is None or expert in only):
            raise asked.refused


# -- the circuit breaker ---------------------------------------------------------------


class Breaker:
    """One endpoint's circuit breaker: closed while it answers; open (no call) after
    ``failures`` failures in a row; after ``cooldown`` seconds, one probe goes
    (half-open), which closes it if it succeeds and opens it again if not."""

    def __init__(self, name: str, failures: int, cooldown: float) -> None:
        self.name = name
        self.failures = failures
        self.cooldown = cooldown
        self.state = CLOSED
        self.failed = 0  # in a row
        self.opened_at = 0.0
        BREAKER_STATE.labels(name).set(CLOSED)

    def admit(self, now: float) -> bool:
        """Whether a request may go now (a probe, when it is due)."""
        if self.state == CLOSED:
            return True
        if self.state == OPEN and now - self.opened_at >= self.cooldown:
            self._set(HALF_OPEN)
            return True
        return False

    def record(self, ok: bool, now: float) -> None:
        if ok:
            self.failed = 0
            self._set(CLOSED)
            return
        self.failed += 1
        if self.state == HALF_OPEN or self.failed >= self.failures:
            self.opened_at = now
            self._set(OPEN)

    def _set(self, state: int) -> None:
        if state != self.state:
            self.state = state
            BREAKER_STATE.labels(self.name).set(state)


# -- calling ---------------------------------------------------------------------------


class Failed(Exception):
    """An endpoint's answer that is no vote: ``outcome`` says why."""

    def __init__(self, outcome: str, detail: str = "") -> None:
        super().__init__(f"{outcome}: {detail}" if detail else outcome)
        self.outcome = outcome


Ask = tuple[Any, float]  # (the row or JSON inputs, when the caller stops waiting)


def _pointer(doc: Any, pointer: str) -> Any:
    """The member of ``doc`` at the JSON pointer (RFC 6901); Failed if there is none."""
    if not pointer:
        return doc
    for token in pointer[1:].split("/"):
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, dict) and key in doc:
            doc = doc[key]
        elif isinstance(doc, list) and key.isdigit() and int(key) < len(doc):
            doc = doc[int(key)]
        else:
            raise Failed("malformed", f"nothing at {pointer!r}")
    return doc


def _rows(doc: Any, name: str, rows: int) -> list[Any]:
    """The rows of the v2 answer ``doc``'s output tensor ``name`` (the first if "")."""
    outputs = doc.get("outputs") if isinstance(doc, dict) else None
    if not isinstance(outputs, list) or not outputs:
        raise Failed("malformed", "no outputs")
    found = [o for o in outputs if isinstance(o, dict) and (not name or o.get("name") == name)]
    if not found:
        raise Failed("malformed", f"no output {name!r}")
    shape, data = found[0].get("shape"), found[0].get("data")
    if (
        not isinstance(shape, list)
        or len(shape) != 2
        or not all(type(n) is int and n >= 0 for n in shape)
        or shape[0] != rows
        or not isinstance(data, list)
    ):
        raise Failed("malformed", f"output shape {shape!r}: expected [{rows}, classes]")
    if data and isinstance(data[0], list):  # nested rather than flat
        data = [v for row in data if isinstance(row, list) for v in row]
    width = shape[1]
    if len(data) != rows * width:
        raise Failed("malformed", f"{len(data)} values for shape {shape}")
    return [data[i * width : (i + 1) * width] for i in range(rows)]


def _score(v: Any) -> float | None:
    if type(v) not in (int, float) or not math.isfinite(v) or v < 0:
        return None
    return float(v)


def vote_of(answer: Any, asked: Asked, space: InputSpace) -> dict[str, float] | None:
    """An expert's vote ``{label: score}`` from its classifier's answer (a row of scores,
    or ``{label: score}``), None when the answer is malformed."""
    keys = [str(label) for label in space.labels]
    out = dict.fromkeys(keys, 0.0)
    if isinstance(answer, list):
        classes = asked.classes or tuple(range(len(keys)))
        if len(answer) != len(classes):
            return None
        for c, v in zip(classes, answer, strict=True):
            s = _score(v)
            if s is None:
                return None
            if c is not None:
                out[keys[c]] = s
        return out
    if isinstance(answer, dict):
        known = 0
        for key, v in answer.items():
            if key in out:
                s = _score(v)
                if s is None:
                    return None
                out[key] = s
                known += 1
        return out if known else None
    return None


class Fanout:
    """A worker's calls to the experts' endpoints: one pooled HTTP client, and per
    endpoint its gathered requests and its circuit breaker."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: httpx.AsyncClient | None = None
        self._breakers: dict[str, Breaker] = {}
        self._plans: dict[str, tuple[InputSpace, Plan | None]] = {}
        self._v2: Gathers[tuple[Endpoint, int], Ask, Any] = Gathers(
            self._send_v2, settings.fanout_max_batch, settings.fanout_concurrency
        )
        self._json: Gathers[Endpoint, Ask, Any] = Gathers(
            self._send_json, 1, settings.fanout_concurrency
        )
        self._waiting: set[asyncio.Future[Any]] = set()  # calls that outlived their caller
        # per model, per expert: the outcomes of its latest answers (at most RECENT)
        self._recent: dict[str, dict[str, deque[str]]] = {}

    def client(self) -> httpx.AsyncClient:
        """The pooled client (keep-alive; HTTP/2 where the h2 package is installed), made
        on first use: it follows no redirect and reads no proxy or credentials from the
        environment."""
        if self._client is None:
            s = self.settings
            self._client = httpx.AsyncClient(
                follow_redirects=False,
                trust_env=False,
                http2=importlib.util.find_spec("h2") is not None,
                limits=httpx.Limits(
                    max_connections=None, max_keepalive_connections=4 * s.fanout_concurrency
                ),
            )
        return self._client

    async def aclose(self) -> None:
        for f in list(self._waiting):
            f.cancel()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def plan(self, name: str, space: InputSpace) -> Plan | None:
        """The plan of a model with input ``space``, read once per input."""
        got = self._plans.get(name)
        if got is not None and got[0] is space:
            return got[1]
        if len(self._plans) >= PLANS_MOST:
            self._plans.clear()
        plan = read_plan(space, self.settings)
        self._plans[name] = (space, plan)
        return plan

    def breaker(self, ep: Endpoint) -> Breaker:
        b = self._breakers.get(ep.target)
        if b is None:
            s = self.settings
            b = self._breakers[ep.target] = Breaker(
                ep.target, s.fanout_breaker_failures, s.fanout_breaker_cooldown_ms / 1000
            )
        return b

    async def votes(
        self, name: str, space: InputSpace, inputs: Any, posted: Mapping[str, Any]
    ) -> dict[str, dict[str, float]]:
        """The votes of model ``name``'s experts that have an endpoint and no vote in
        ``posted``, asked with ``inputs``: those that answered in time with a usable
        answer (the others abstain)."""
        plan = self.plan(name, space)
        if plan is None or not plan.experts:
            raise BadInput(
                "inputs", f"model {name!r} has no expert with an endpoint: post instance.experts"
            )
        asked = {
            e: a for e, a in plan.experts.items() if e not in posted and e not in space.retired
        }
        row = None
        if any(a.endpoint is not None and a.endpoint.protocol == "v2" for a in asked.values()):
            row = _row(inputs)
        loop = asyncio.get_running_loop()
        start = loop.time()
        expires = time.monotonic() + plan.deadline_ms / 1000
        tasks: dict[str, asyncio.Future[tuple[Any, float]]] = {}
        outcomes: dict[str, str] = {}
        for e, a in asked.items():
            ep = a.endpoint
            if ep is None or not allowed(ep.target, self.settings.allowed_endpoints):
                outcomes[e] = "refused"
                continue
            ask = (
                self._v2((ep, len(row or ())), (row, expires))
                if ep.protocol == "v2"
                else (self._json(ep, (inputs, expires)))
            )
            tasks[e] = asyncio.ensure_future(_timed(ask, start))
        if tasks:
            await asyncio.wait(tasks.values(), timeout=plan.deadline_ms / 1000)
        out: dict[str, dict[str, float]] = {}
        for e, t in tasks.items():
            if not t.done():
                outcomes[e] = "late"
                self._waiting.add(t)
                t.add_done_callback(self._outlived)
                continue
            try:
                answer, seconds = t.result()
            except Failed as f:
                outcomes[e] = f.outcome
                continue
            except Exception:
                outcomes[e] = "error"
                continue
            vote = vote_of(answer, asked[e], space)
            if vote is None:
                outcomes[e] = "malformed"
                continue
            out[e] = vote
            outcomes[e] = "ok"
            EXPERT_SECONDS.labels(name, e).observe(seconds)
        recent = self._recent.get(name)
        if recent is None:
            if len(self._recent) >= PLANS_MOST:
                self._recent.clear()
            recent = self._recent[name] = {}
        for e, outcome in outcomes.items():
            EXPERT_OUTCOMES.labels(name, e, outcome).inc()
            recent.setdefault(e, deque(maxlen=RECENT)).append(outcome)
        return out

    def health(self, name: str, space: InputSpace) -> dict[str, Any]:
        """What this worker knows of model ``name``'s endpoints: per expert with one, its
        protocol and URL, its breaker's state and failures in a row, and the outcomes of
        its latest answers (at most :data:`RECENT`) counted."""
        plan = self.plan(name, space)
        recent = self._recent.get(name, {})
        endpoints = []
        for e, a in (plan.experts if plan else {}).items():
            ep = a.endpoint
            b = self._breakers.get(ep.target) if ep is not None else None
            seen = recent.get(e, ())
            endpoints.append(
                {
                    "expert": e,
                    "protocol": ep.protocol if ep else None,
                    "url": ep.target if ep else None,
                    "breaker": STATES[b.state] if b else "closed",
                    "failures": b.failed if b else 0,
                    "recent": {o: n for o in OUTCOMES if (n := sum(x == o for x in seen))},
                    "refused": None if a.refused is None else a.refused.message,
                }
            )
        return {"deadline_ms": plan.deadline_ms if plan else None, "endpoints": endpoints}

    def _outlived(self, t: asyncio.Future[Any]) -> None:
        self._waiting.discard(t)
        if not t.cancelled():
            t.exception()  # retrieved: an abstention already

    async def _send_v2(self, key: tuple[Endpoint, int], items: list[Ask]) -> list[Any]:
        """One v2 request with the rows of the callers still waiting; each its row of
        the output, or a :class:`Failed`."""
        ep, width = key
        now = time.monotonic()
        out: list[Any] = [Failed("late")] * len(items)
        live = [i for i, (_, expires) in enumerate(items) if expires > now]
        if not live:
            return out
        body: dict[str, Any] = {
            "inputs": [
                {
                    "name": ep.input,
                    "shape": [len(live), width],
                    "datatype": "FP64",
                    "data": [v for i in live for v in items[i][0]],
                }
            ]
        }
        if ep.output:
            body["outputs"] = [{"name": ep.output}]
        try:
            doc = await self._post(ep, orjson.dumps(body))
            rows = _rows(doc, ep.output, len(live))
        except Failed as f:
            self._failed(ep, f)
            for i in live:
                out[i] = f
            return out
        self.breaker(ep).record(True, time.monotonic())
        for i, r in zip(live, rows, strict=True):
            out[i] = r
        return out

    async def _send_json(self, ep: Endpoint, items: list[Ask]) -> list[Any]:
        (inputs, expires), *_ = items
        if expires <= time.monotonic():
            return [Failed("late")]
        try:
            answer = _pointer(await self._post(ep, orjson.dumps(inputs)), ep.output)
        except Failed as f:
            self._failed(ep, f)
            return [f]
        self.breaker(ep).record(True, time.monotonic())
        return [answer]

    def _failed(self, ep: Endpoint, f: Failed) -> None:
        if f.outcome != "open":  # a call that went, and failed
            self.breaker(ep).record(False, time.monotonic())

    async def _post(self, ep: Endpoint, body: bytes) -> Any:
        """POST ``body`` to the endpoint (when its breaker admits it) and read the JSON
        answer, within its timeout and the byte bound; Failed otherwise."""
        if not self.breaker(ep).admit(time.monotonic()):
            raise Failed("open")
        headers = {"content-type": "application/json", "accept": "application/json"}
        if ep.headers_secret is not None:
            secret = self.settings.endpoint_secrets.get(ep.headers_secret)
            if secret is None:
                raise Failed("error", f"no secret {ep.headers_secret!r}")
            headers.update(secret)
        most = self.settings.fanout_max_answer_bytes
        try:
            async with asyncio.timeout(ep.timeout_ms / 1000):
                async with self.client().stream(
                    "POST", ep.target, content=body, headers=headers
                ) as r:
                    if r.status_code != 200:
                        raise Failed("error", f"HTTP {r.status_code}")
                    length = r.headers.get("content-length", "")
                    if length.isdigit() and int(length) > most:
                        raise Failed("error", f"{length} bytes: at most {most}")
                    chunks, n = [], 0
                    async for chunk in r.aiter_bytes():
                        n += len(chunk)
                        if n > most:
                            raise Failed("error", f"more than {most} bytes")
                        chunks.append(chunk)
        except TimeoutError:
            raise Failed("timeout") from None
        except httpx.HTTPError as e:
            raise Failed("error", type(e).__name__) from None
        try:
            return orjson.loads(b"".join(chunks))
        except orjson.JSONDecodeError:
            raise Failed("malformed", "not JSON") from None


async def _timed(ask: Any, start: float) -> tuple[Any, float]:
    """What ``ask`` gives (a :class:`Failed` raised), with the seconds since ``start``."""
    got = await ask
    if isinstance(got, Failed):
        raise got
    return got, asyncio.get_running_loop().time() - start


def _row(inputs: Any) -> list[float]:
    """``inputs`` as one row of a v2 tensor: a list of finite numbers."""
    if (
        not isinstance(inputs, list)
        or not 0 < len(inputs) <= MAX_ROW
        or not all(type(v) in (int, float) and math.isfinite(v) for v in inputs)
    ):
        raise BadInput(
            "inputs", f"expected a list of 1 to {MAX_ROW} finite numbers (a v2 endpoint's row)"
        )
    return [float(v) for v in inputs]
