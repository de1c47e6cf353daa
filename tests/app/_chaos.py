"""Chaos helpers: requests that carry on through faults, and what must hold afterwards.

:meth:`Load.send` sends a request again after a 503 or a broken connection, as the Python
client does (same trial id, same label, same ``Idempotency-Key``), until it gets an
answer, and records it as a :class:`Sent`; a status the scenario does not allow is noted
in ``Load.unexpected``. ``kept`` models are never deleted; ``churned`` ones are deleted
and created again, so 404 and 409 are allowed on them. :func:`check_service` then holds
the service and its Redis to what they guarantee, from what was answered.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import redis
from _procs import (
    Replay,
    assert_same_state,
    majority_payloads,
    replay,
    wait_folded,
    wait_ready,
)

from storage.client import close, connect
from storage.codec import encode_instance
from storage.keys import AuthKeys, Keys, Registry
from storage.repository import ModelStore

__all__ = ["Load", "Sent", "check_service"]

RETRY_FOR = 90.0  # seconds a request is retried before the clients give up on it
GRAVE_FILL = 1_001  # predictions that make a deleted model's trial hashes go to a grave
# op -> (method, path after /v1/models, statuses allowed on a kept model, on a churned one)
ROUTES: dict[str, tuple[str, str, set[int], set[int]]] = {
    "create": ("POST", "", {201}, {201, 409}),
    "delete": ("DELETE", "/{}", {204}, {204, 404}),
    "predict": ("POST", "/{}/predict", {200}, {200, 404}),
    "predict/batch": ("POST", "/{}/predict/batch", {200}, {200, 404}),
    "label": ("POST", "/{}/label", {200}, {200, 404}),
    "learn": ("POST", "/{}/learn", {200}, {200, 404, 409}),
    "learn/batch": ("POST", "/{}/learn/batch", {200}, {200, 404, 409}),
}


@dataclass
class Sent:
    """One request: when it was first sent and finally answered, and the answer."""

    op: str
    name: str
    body: Any
    key: str | None
    t0: float
    t1: float = 0.0
    status: int = 0  # 0: never answered
    answer: Any = None

    def codes(self) -> set[int]:
        """The status, or those of the items of a batch answered 200."""
        if self.status == 200 and self.op.endswith("/batch"):
            return {i["error"]["status"] if i["error"] else 200 for i in self.answer["items"]}
        return {self.status}

    def items(self) -> list[Any]:
        """The learn items sent, and the answer to each (None for an error)."""
        sent = self.body["items"] if self.op == "learn/batch" else [self.body]
        got = [None] * len(sent) if self.status != 200 else [self.answer]
        if self.status == 200 and self.op == "learn/batch":
            got = [i["result"] for i in self.answer["items"]]
        return list(zip(sent, got, strict=True))


class Load:
    """What clients of ``kept`` and ``churned`` models sent, and the answers."""

    def __init__(self, url: str, kept: list[str], churned: list[str], seed: int) -> None:
        self.url = url
        self.kept, self.churned = kept, churned
        self.rng = random.Random(seed)
        self.data = iter(majority_payloads(40_000, np.random.default_rng(seed)))
        self.sent: list[Sent] = []
        self.unexpected: list[str] = []
        self.retries: Counter[str] = Counter()
        self.stop = asyncio.Event()

    async def until(self, answered: int, timeout: float = 60.0) -> None:
        """Until the clients have had ``answered`` more answers: faults hit a busy service."""
        deadline, goal = time.monotonic() + timeout, self.answered() + answered
        while self.answered() < goal:
            assert time.monotonic() < deadline, f"{self.answered()} of {goal} answered"
            await asyncio.sleep(0.02)

    def answered(self) -> int:
        return sum(s.status > 0 for s in self.sent)

    def of(self, name: str, *ops: str) -> list[Sent]:
        return [s for s in self.sent if s.name == name and s.op in ops]

    async def send(
        self, c: httpx.AsyncClient, op: str, name: str, body: Any = None, key: str | None = None
    ) -> Sent:
        """Send until answered (not 503, not a broken connection); check the status."""
        method, tail, kept_ok, churned_ok = ROUTES[op]
        s = Sent(op, name, body, key, time.monotonic())
        headers = {"Idempotency-Key": key} if key else None
        self.sent.append(s)
        while True:
            try:
                r = await c.request(
                    method, "/v1/models" + tail.format(name), json=body, headers=headers
                )
            except httpx.TransportError as e:
                self.retries[type(e).__name__] += 1
            else:
                if r.status_code != 503:
                    break
                self.retries["503"] += 1
            if time.monotonic() - s.t0 > RETRY_FOR:
                self.unexpected.append(f"{op} {name}: no answer in {RETRY_FOR:g} s")
                return s
            await asyncio.sleep(self.rng.uniform(0.05, 0.25))
        s.t1, s.status = time.monotonic(), r.status_code
        s.answer = r.json() if r.content else None
        if not s.codes() <= (churned_ok if name in self.churned else kept_ok):
            self.unexpected.append(f"{op} {name}: {s.status} {r.text[:300]}")
        return s


# -- what must hold after a scenario ---------------------------------------------------

FIXED = frozenset(("meta", "log", "snapshot", "pending", "trials", "curve", "window", "summary"))
CLOSE = {"Connection": "close"}  # a new connection per request: any worker may answer
# a labelled trial as the scripts keep it: '<p>:<v>:<d>:<y>:<q>:<u>:...'
TRIAL = re.compile(rb"(?P<p>\d+):\d*:\d+:\d*:(?P<q>\d*):(?P<u>\d?):")


def text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def members(r: redis.Redis, key: str) -> set[str]:
    """The fields of a hash or the members of a sorted set."""
    got = r.hkeys(key) if r.type(key) == b"hash" else r.zrange(key, 0, -1)
    return {text(m) for m in got}


class Retrying(httpx.HTTPTransport):
    """Requests sent again after a 503, as the Python client does (a connection left
    half-open in a worker's pool answers 503 once it is used, until the watchdog drops it)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(40):
            got = super().handle_request(request)
            if got.status_code != 503:
                break
            got.close()
            time.sleep(0.25)
        return got


def check_service(
    url: str, redis_url: str, prefix: str, load: Load, log: Path | None = None
) -> None:
    """Every invariant, once the load has stopped: answers, logs, states, listing, keys
    (``log``: the service's, whose warnings a failure shows)."""
    seen = sorted(Counter((s.op, s.status) for s in load.sent).items())
    assert load.unexpected == [], (load.unexpected[:10], seen, load.retries)
    assert all(s.status for s in load.sent)
    c = httpx.Client(base_url=url, timeout=60, transport=Retrying())
    with c, redis.Redis.from_url(redis_url) as r:
        wait_ready(c)
        # a create or delete cut by a kill leaves its name unsettled: once such an entry
        # is old, every worker's sweep settles it (aged here rather than waited for)
        unsettled = Registry(prefix).unsettled
        if cut := members(r, unsettled):
            r.zadd(unsettled, dict.fromkeys(cut, 0))
        asyncio.run(sweep(redis_url, prefix))
        assert r.zcard(unsettled) == 0
        names = check_listing(c, r, prefix, load)
        for name in set(names) & {*load.kept, *load.churned}:  # others: scenarios before
            check_model(c, r, redis_url, prefix, name, load, log)
        for name in names:  # no model is left broken
            x, y = next(load.data)
            p = c.post(f"/v1/models/{name}/predict", json={"instance": x})
            assert p.status_code == 200, p.text
            body = {"trial_id": p.json()["trial_id"], "label": y}
            got = c.post(f"/v1/models/{name}/label", json=body)
            assert got.status_code == 200, got.text
        check_keys(r, prefix)
        asyncio.run(sweep(redis_url, prefix))
        assert r.zcard(Registry(prefix).graves) == 0
        check_keys(r, prefix)


def check_listing(c: httpx.Client, r: redis.Redis, prefix: str, load: Load) -> list[str]:
    """A model is listed exactly when its meta key exists (with its incarnation), and
    readable exactly then."""
    registry = Registry(prefix)
    listed = members(r, registry.models)
    for name in listed:
        assert r.hget(registry.models, name) == r.hget(Keys(prefix, name).meta, "incarnation")
    pattern = re.compile(re.escape(prefix) + r":\{(.+)\}:meta")
    metas = {
        m[1]
        for k in r.scan_iter(match=f"{prefix}:*:meta", count=1000)
        if (m := pattern.fullmatch(text(k)))
    }
    assert listed == metas, (listed, metas)
    assert {m["name"] for m in c.get("/v1/models").json()["models"]} == listed
    for name in set(load.kept + load.churned) | listed:
        got = c.get(f"/v1/models/{name}")
        assert got.status_code == (200 if name in listed else 404), (name, got.text)
    return sorted(listed)


def made_at(r: redis.Redis, prefix: str, name: str, inc: bytes, load: Load) -> tuple[float, float]:
    """(first sent, answered) of the acknowledged create that made incarnation ``inc``."""
    for s in load.of(name, "create"):
        if s.status == 201 and r.hget(Keys(prefix, name).idem(s.key or ""), "inc") == inc:
            return s.t0, s.t1
    raise AssertionError(f"model {name}: incarnation {inc!r} made by no acknowledged create")


def check_model(
    c: httpx.Client,
    r: redis.Redis,
    redis_url: str,
    prefix: str,
    name: str,
    load: Load,
    log: Path | None = None,
) -> None:
    """The log replays to the state every worker serves and the counters it reports; every
    acknowledged label and learn of this incarnation is in it once, as answered. What was
    sent after the incarnation was made must be in it; what was answered before, not."""
    keys = Keys(prefix, name)
    inc: Any = r.hget(keys.meta, "incarnation")
    assert inc is not None
    made, made_acked = made_at(r, prefix, name, inc, load)
    served = {s.body["trial_id"]: s for s in load.of(name, "predict") if s.status == 200}
    at_version: dict[int, list[Any]] = {}
    for s in served.values():  # predictions by this incarnation
        if s.t0 > made_acked:
            row = (s.body["instance"], s.answer["label"], s.answer["scores"])
            at_version.setdefault(s.answer["model_version"], []).append(row)
    for s in load.sent:  # the model was there all the time this was sent and answered
        later = s.name == name and s.t0 > made_acked and s.op != "create"
        if later and (s.op != "label" or served[s.body["trial_id"]].t0 > made_acked):
            assert s.codes() <= ROUTES[s.op][2], f"{name}: {s.op} {s.key} {s.answer}"
    rep = replay(redis_url, prefix, name, at_version)
    m = rep.model
    assert rep.at_version == {}, f"{name}: predictions not made by the hypothesis of their version"
    states = [c.get(f"/v1/models/{name}/state", headers=CLOSE) for _ in range(8)]
    assert {s.status_code for s in states} == {200} and len({s.text for s in states}) == 1
    assert states[0].json()["model_version"] == m.version
    assert_same_state(orjson.loads(m.export()), states[0].json()["state"], name)
    counters = wait_folded(c, name)["counters"]
    kinds = Counter(rep.kinds.values())
    assert counters["labelled"] == kinds["label"] and counters["learned"] == kinds["learn"]
    got = [counters[k] for k in ("mistakes", "updates", "quarantined")]
    assert got == [rep.mistakes, rep.updates, 0], (
        f"{name}: counters {counters}; the replay: {rep.mistakes} mistakes, {rep.updates} "
        f"updates; outcomes folded otherwise: {misfolded(r, keys, inc, rep, load)}; "
        f"the service's warnings: {warnings(log)}"
    )

    labels = {s.body["trial_id"]: s for s in load.of(name, "label") if s.status == 200}
    for t, seqs in rep.trial_seq.items():
        assert t in labels and len(seqs) == 1, (
            f"{name}: trial {t} in the log {len(seqs)} times, answered {t in labels}"
        )
    for t, s in labels.items():
        if t not in rep.trial_seq:
            assert s.t0 < made_acked, (
                f"{name}: label of {t} sent after the model was made, not in its log"
            )
            continue
        assert s.t1 > made, f"{name}: label of {t} answered before the model was made"
        seq, y = rep.trial_seq[t][0], s.body["label"]
        p = m.labels[rep.predicted[seq]]
        assert (p, m.labels[rep.y[seq]]) == (served[t].answer["label"], y), f"{name}: trial {t}"
        assert s.answer == {"trial_id": t, **judged(p, y, rep.updated[seq])}, (name, seq)

    covered: set[int] = set()
    for s in load.of(name, "learn", "learn/batch"):
        rec = r.hgetall(keys.idem(s.key or ""))
        acked = any(got is not None for _, got in s.items())
        if rec.get(b"inc") != inc:  # refused, or learned by an earlier incarnation
            assert not acked or (rec and s.t0 < made_acked), f"{name}: learn {s.key} {rec}"
            continue
        assert s.t1 > made, f"{name}: learn {s.key} answered before the model was made"
        a, n = int(rec[b"a"]), int(rec[b"n"])
        assert n == len(s.items()), f"{name}: learn {s.key} appended {n} items"
        for seq, (item, got) in enumerate(s.items(), start=a):
            assert rep.kinds.get(seq) == "learn" and seq not in covered, f"{name}: seq {seq}"
            assert (
                rep.x[seq] == encode_instance(m.encode(item["instance"]))
                and m.labels[rep.y[seq]] == item["label"]
            )
            p, y = m.labels[rep.predicted[seq]], item["label"]
            assert got == judged(p, y, rep.updated[seq]), (name, seq, got)
            covered.add(seq)
    twice = sorted(seq for seq, k in rep.kinds.items() if k == "learn" and seq not in covered)
    assert twice == [], f"{name}: learn entries no acknowledged request accounts for: {twice[:10]}"


def misfolded(r: redis.Redis, keys: Keys, inc: Any, rep: Replay, load: Load) -> list[str]:
    """The log entries whose outcome, as folded into a trial or an idempotency record,
    is not the replay's: 'seq kind folded p:u, replayed p:u'."""
    folded: dict[int, str] = {}
    for s in load.sent:
        if s.key and s.op.startswith("learn"):
            rec = r.hgetall(keys.idem(s.key))
            for field, v in rec.items() if rec.get(b"inc") == inc else ():
                if field.startswith(b"o") and field[1:].isdigit():
                    folded[int(field[1:])] = text(v)
    for t, seqs in rep.trial_seq.items():
        got = TRIAL.match(r.get(keys.trial(text(inc), t)) or b"")
        if got and got["q"] == str(seqs[0]).encode() and got["u"]:
            folded[seqs[0]] = f"{text(got['p'])}:{text(got['u'])}"
    out = []
    for seq, got in sorted(folded.items()):
        want = f"{rep.predicted[seq]}:{int(rep.updated[seq])}"
        if got != want:
            out.append(f"{seq} {rep.kinds[seq]} folded {got}, replayed {want}")
    return out


def warnings(log: Path | None) -> list[str]:
    """The service's log lines of level warning or above (the last 40)."""
    if log is None or not log.exists():
        return []
    lines = log.read_text(errors="replace").splitlines()
    pattern = re.compile(r"WARNING|ERROR|Traceback|\"level\": ?\"(warning|error|critical)\"")
    return [line[:400] for line in lines if pattern.search(line)][-40:]


def judged(p: Any, y: Any, updated: bool) -> dict[str, Any]:
    return {"predicted": p, "label": y, "mistake": p != y, "updated": updated}


def check_keys(r: redis.Redis, prefix: str) -> None:
    """No key is orphaned: each belongs to a listed model (its current incarnation's
    trials), to a grave still listed, or is an idempotency record; these expire."""
    registry = Registry(prefix)
    listed = members(r, registry.models)
    graves = members(r, registry.graves)
    inc = {n: text(r.hget(Keys(prefix, n).meta, "incarnation") or b"") for n in listed}
    pattern = re.compile(re.escape(prefix) + r":\{([^}]+)\}:(.+)")
    auth = AuthKeys(prefix)
    for raw in r.scan_iter(match=f"{prefix}:*", count=1000):
        key = text(raw)
        if key in (registry.models, registry.unsettled, registry.graves, auth.audit):
            continue  # the registry and the audit log are of the service, not of a model
        m = pattern.fullmatch(key)
        assert m is not None, f"orphan key {key}"
        name, rest = m.groups()
        kind, _, tail = rest.partition(":")
        if kind == "trial":
            trial_inc = tail.split(":", 1)[0]
            grave = Keys(prefix, name).grave(trial_inc)
            assert inc.get(name) == trial_inc or grave in graves, f"orphan trial {key}"
        elif kind == "grave":
            assert key in graves, f"grave {key} not listed"
        else:
            assert (rest in FIXED and name in listed) or kind == "idem", f"orphan key {key}"
        if kind in ("trial", "idem"):
            assert r.pttl(key) != -1, f"{key} never expires"


async def sweep(redis_url: str, prefix: str) -> None:
    """What every worker does every 30 s: empty the graves."""
    clients = connect(redis_url)
    try:
        assert await ModelStore(clients, prefix).sweep() == 0
    finally:
        await close(clients)
