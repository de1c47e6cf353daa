"""Each Lua script called directly on a real Redis, by its KEYS/ARGV contract: what a good
call writes, and that a refusal (a bad argument, the wrong state) writes nothing."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import redis
from _scripts import run, state, writes_nothing

from models.core.instance import Attributes
from storage.codec import encode_instance
from storage.keys import Keys, Registry, job_key
from storage.scripts import LUA, SCRIPTS
from storage.store.calls import position

INC = "00aa11bb22cc33dd"  # the model's incarnation
LIFE = 600_000  # an idempotency record's lifetime (ms)
SCORES = b"\x00" * 16


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    for s in SCRIPTS.values():  # registered once, under the SHA1 the service sends
        assert client.script_load(s.text) == s.sha
    yield client
    client.close()


@pytest.fixture
def k(redis_prefix: str) -> Keys:
    return Keys(redis_prefix, "m")


def call(r: redis.Redis, name: str, keys: list[str], args: list[Any]) -> Any:
    return run(r, SCRIPTS[name], keys, args)


def refuses(r: redis.Redis, prefix: str, name: str, keys: list[str], args: list[Any]) -> Any:
    """The reply of a call that must write nothing."""
    return writes_nothing(r, prefix, SCRIPTS[name], keys, args)


def x(i: int) -> bytes:
    return encode_instance(Attributes([i % 4], [1.0]))


def model(r: redis.Redis, k: Keys) -> None:
    """A model of 2 classes and 4 features, incarnation INC."""
    assert call(r, "CREATE", [*k.all_fixed(), k.meta], [INC, b"{}", 2, 4, "", LIFE])[0] == b"ok"


def predict(r: redis.Redis, k: Keys, items: list[tuple[str, bytes, int]], **kw: Any) -> Any:
    args = [INC, position(kw.get("known", 0), ""), kw.get("strict", "0"), kw.get("ttl", 60_000)]
    args += [b"", 10, kw.get("most", 100)]
    for trial_id, data, p in items:
        args += [trial_id, data, p, SCORES]
    trials = [k.trial(INC, t) for t, *_ in items]
    return call(r, "PREDICT", [*k.all_fixed(), *trials], args)


def label(r: redis.Redis, k: Keys, items: list[tuple[str, int]], known: int = 0) -> Any:
    args: list[Any] = [INC, position(known, "", "s1"), b"", 10]
    for trial_id, y in items:
        args += [trial_id, y]
    trials = [k.trial(INC, t) for t, _ in items]
    return call(r, "LABEL", [*k.all_fixed(), *trials], args)


def learn(r: redis.Redis, k: Keys, n: int, known: int = 0, idem: str = "", h: str = "") -> Any:
    args: list[Any] = [INC, position(known, "", "s2"), b"", 10, LIFE, idem, h, n]
    for i in range(n):
        args += [x(i), i % 2]
    keys = [*k.all_fixed(), *([k.idem(idem)] if idem else [])]
    return call(r, "LEARN", keys, args)


def fold(first: int, outcomes: list[tuple[int, int, int, str]]) -> bytes:
    return orjson.dumps({"a": first, "e": outcomes})


def now_ms() -> int:
    return int(time.time() * 1000)


def test_every_script_file_is_loaded_and_names_its_preludes() -> None:
    files = sorted(f.stem.upper() for f in LUA.glob("*.lua"))
    assert sorted(SCRIPTS) == files and len(files) == 19
    for name, s in SCRIPTS.items():
        first = (LUA / f"{name.lower()}.lua").read_text().splitlines()[0]
        assert first == "-- prelude: " + (", ".join(s.preludes) or "none")
        for p in s.preludes:
            assert (LUA / "prelude" / f"{p}.lua").read_text() in s.text
    assert SCRIPTS["IMPORT"].preludes == ("model", "once") and SCRIPTS["STATS"].preludes == ()


def test_register(r: redis.Redis, redis_prefix: str) -> None:
    g = Registry(redis_prefix)
    assert call(r, "REGISTER", [g.models, g.unsettled], ["m", INC, 1, 1234]) == [b"ok"]
    assert r.hgetall(g.models) == {b"m": INC.encode()}
    assert r.zrange(g.unsettled, 0, -1, withscores=True) == [(b"m", 1234.0)]
    # full: another name beyond the most models
    got = refuses(r, redis_prefix, "REGISTER", [g.models, g.unsettled], ["n", INC, 1, 5])
    assert got == [b"full"]


def test_unsettle_and_settle(r: redis.Redis, redis_prefix: str) -> None:
    g = Registry(redis_prefix)
    keys = [g.models, g.unsettled]
    assert refuses(r, redis_prefix, "UNSETTLE", keys, ["m", 7]) == [b"ok"]  # not listed
    call(r, "REGISTER", keys, ["m", INC, 10, 1])
    call(r, "SETTLE", keys, ["m", INC, INC])
    assert r.zcard(g.unsettled) == 0 and r.hget(g.models, "m") == INC.encode()
    assert call(r, "UNSETTLE", keys, ["m", 7]) == [b"ok"]
    assert r.zscore(g.unsettled, "m") == 7
    # another create or delete listed the name meanwhile
    assert refuses(r, redis_prefix, "SETTLE", keys, ["m", "ffff", ""]) == [b"changed"]
    assert call(r, "SETTLE", keys, ["m", INC, ""]) == [b"ok"]
    assert r.exists(g.models, g.unsettled) == 0


def test_create(r: redis.Redis, redis_prefix: str, k: Keys) -> None:
    r.rpush(k.curve, "1:0")  # left by an earlier incarnation: cleared
    got = call(r, "CREATE", [*k.all_fixed(), k.idem("c")], [INC, b'{"a":1}', 3, 9, "h", LIFE])
    assert got[0] == b"ok" and abs(int(got[1]) - time.time()) < 60
    meta = r.hgetall(k.meta)
    assert meta[b"incarnation"] == INC.encode() and meta[b"config"] == b'{"a":1}'
    assert (meta[b"k"], meta[b"n"], meta[b"version"], meta[b"folded"]) == (b"3", b"9", b"0", b"0")
    assert not r.exists(k.curve)
    assert r.hgetall(k.idem("c")) == {
        b"op": b"create",
        b"h": b"h",
        b"created": got[1],
        b"inc": INC.encode(),
    }
    assert 0 < r.pttl(k.idem("c")) <= LIFE
    keys = [*k.all_fixed(), k.idem("c")]
    assert refuses(r, redis_prefix, "CREATE", keys, ["ffff", b"{}", 2, 4, "h", LIFE]) == [
        b"repeat",
        got[1],
        INC.encode(),
    ]
    assert refuses(r, redis_prefix, "CREATE", keys, ["ffff", b"{}", 2, 4, "other", LIFE]) == [
        b"mismatch"
    ]
    exists = refuses(r, redis_prefix, "CREATE", [*k.all_fixed(), k.meta], ["f", b"{}", 2, 4, "", 1])
    assert exists == [b"exists", INC.encode()]


def test_delete(r: redis.Redis, redis_prefix: str, k: Keys) -> None:
    model(r, k)
    predict(r, k, [("t1", x(1), 0), ("t2", x(2), 1)])
    fixed = [*k.all_fixed(), k.idem("d")]
    trials = [k.trial(INC, "t1"), k.trial(INC, "t2")]
    # the model read under another incarnation: nothing written, read it again
    args = ["h", LIFE, "ffff", "t1", "t2"]
    assert refuses(r, redis_prefix, "DELETE", [*fixed, k.grave("ffff"), *trials], args) == [
        b"moved"
    ]
    # every trial declared: deleted in the same step, no grave
    got = call(r, "DELETE", [*fixed, k.grave(INC), *trials], ["h", LIFE, INC, "t1", "t2"])
    assert got == [b"ok", 0]
    assert set(r.scan_iter(f"{redis_prefix}:*")) == {k.idem("d").encode()}
    assert r.hgetall(k.idem("d")) == {b"op": b"delete", b"h": b"h"}
    again = [*fixed, k.grave(INC)]
    assert refuses(r, redis_prefix, "DELETE", again, ["h", LIFE, INC]) == [b"repeat"]
    assert refuses(r, redis_prefix, "DELETE", again, ["x", LIFE, INC]) == [b"mismatch"]
    assert refuses(
        r, redis_prefix, "DELETE", [*k.all_fixed(), k.meta, k.grave(INC)], ["", 1, INC]
    ) == [b"gone"]


def test_delete_leaves_undeclared_trials_to_a_grave(r: redis.Redis, k: Keys) -> None:
    model(r, k)
    predict(r, k, [("t1", x(1), 0), ("t2", x(2), 1)])
    got = call(r, "DELETE", [*k.all_fixed(), k.meta, k.grave(INC)], ["", LIFE, INC, "t1"])
    assert got == [b"ok", 1]
    assert r.zrange(k.grave(INC), 0, -1) == [b"t1", b"t2"] and not r.exists(k.meta)
    assert r.exists(k.trial(INC, "t1"), k.trial(INC, "t2")) == 2


def test_sweep(r: redis.Redis, redis_prefix: str, k: Keys) -> None:
    grave = k.grave(INC)
    r.zadd(grave, {"t1": 1, "t2": 2})
    r.set(k.trial(INC, "t1"), "a")
    r.set(k.trial(INC, "t2"), "b")
    # ids the grave does not list: nothing deleted
    got = refuses(r, redis_prefix, "SWEEP", [grave, k.trial(INC, "t3")], ["t3"])
    assert got == [b"ok", 2]
    assert call(r, "SWEEP", [grave, k.trial(INC, "t1")], ["t1"]) == [b"ok", 1]
    assert r.zrange(grave, 0, -1) == [b"t2"] and not r.exists(k.trial(INC, "t1"))


def test_idem_answer(r: redis.Redis, redis_prefix: str, k: Keys) -> None:
    r.hset(k.idem("a"), mapping={"op": "learn", "h": "h"})
    assert call(r, "IDEM_ANSWER", [k.idem("a")], ["h", b"answer"]) == [b"ok"]
    assert r.hget(k.idem("a"), "r") == b"answer"
    assert refuses(r, redis_prefix, "IDEM_ANSWER", [k.idem("a")], ["other", b"x"]) == [b"gone"]
    assert refuses(r, redis_prefix, "IDEM_ANSWER", [k.idem("b")], ["h", b"x"]) == [b"gone"]


def test_predict(r: redis.Redis, redis_prefix: str, k: Keys) -> None:
    model(r, k)
    t0 = now_ms()
    got = predict(r, k, [("t1", x(1), 1), ("t2", x(2), 0)], ttl=90_000)
    assert got[:4] == [b"ok", 0, 0, []] and got[4] == [[b"ok"], [b"ok"]]
    # one key per trial: '<p>:<v>:<d>:<y>:<q>:<u>:<#x>:' x s, expiring its grace after d
    raw = r.get(k.trial(INC, "t1"))
    m = re.fullmatch(rb"1:0:(\d+)::::(\d+):(.*)", raw, re.S)
    assert m is not None and int(m[2]) == len(x(1)) and m[3] == x(1) + SCORES
    deadline = int(m[1])
    assert t0 + 90_000 <= deadline <= now_ms() + 90_000
    assert r.pexpiretime(k.trial(INC, "t1")) == deadline + 90_000
    # indexed by deadline; counted; the longest grace kept for the sweep
    assert r.zscore(k.trials, "t1") == deadline and r.zcard(k.trials) == 2
    assert r.hmget(k.meta, "predictions", "grace") == [b"2", b"90000"]
    assert not r.exists(k.pending)

    def refused(items: list[tuple[str, bytes, int]], **kw: Any) -> Any:
        fixed = [*k.all_fixed(), *(k.trial(INC, t) for t, *_ in items)]
        args = [INC, position(kw.get("known", 0), ""), kw.get("strict", "0"), 60_000, b"", 10]
        args.append(kw.get("most", 100))
        for t, data, p in items:
            args += [t, data, p, SCORES]
        return refuses(r, redis_prefix, "PREDICT", fixed, args)

    assert refused([("t1", x(1), 0)])[4] == [[b"existing", b"1", SCORES, b"0"]]
    assert refused([("t1", x(3), 0)])[4] == [[b"conflict"]]
    assert refused([("t3", x(3), 2)])[4] == [[b"invalid"]]  # class 2 of 2
    assert refused([("t3", encode_instance(Attributes([4], [1.0])), 0)])[4] == [[b"invalid"]]
    assert refused([("t3", b"A" + b"\x00" * 5, 0)])[4] == [[b"invalid"]]
    assert refused([("t3", x(3), 0)], most=2)[4] == [[b"full"]]
    learn(r, k, 1)
    assert refused([("t3", x(3), 0)], strict="1")[0] == b"stale"  # version 1, not 0
    gone = [*k.all_fixed(), k.trial("ffff", "t3")]
    args = ["ffff", "0", "0", 1, b"", 0, 10, "t3", x(3), 0, SCORES]
    assert refuses(r, redis_prefix, "PREDICT", gone, args) == [b"gone"]


def test_predict_sweeps_expired_trials(r: redis.Redis, k: Keys) -> None:
    model(r, k)
    predict(r, k, [("t1", x(1), 1)], ttl=1)
    time.sleep(0.01)
    predict(r, k, [("t2", x(2), 1)])
    # expired, and kept (indexed by minus its purge time) while its key lives
    assert r.hget(k.meta, "expired") == b"1"
    deadline = int(r.get(k.trial(INC, "t1")).split(b":")[2])
    assert r.zscore(k.trials, "t1") == -(deadline + 60_000)
    assert r.zcount(k.trials, 0, "+inf") == 1


def test_label(r: redis.Redis, redis_prefix: str, k: Keys) -> None:
    model(r, k)
    predict(r, k, [("t1", x(1), 1), ("t2", x(2), 0)])
    expires = r.pexpiretime(k.trial(INC, "t1"))
    got = label(r, k, [("t1", 0)])
    assert got[:4] == [b"ok", 1, 0, []] and got[4] == [[b"ok", b"1", 1, x(1), b"0"]]
    ((entry_id, fields),) = r.xrange(k.log)
    assert entry_id == b"1-0" and fields == {
        b"k": b"l",
        b"t": b"t1",
        b"x": x(1),
        b"y": b"0",
        b"p": b"1",
        b"v": b"0",
        b"w": b"s1",
    }
    # the trial keeps what a retried label needs, and its expiry; indexed as kept
    assert re.fullmatch(rb"1:0:\d+:0:1::0:", r.get(k.trial(INC, "t1")))
    assert r.pexpiretime(k.trial(INC, "t1")) == expires
    assert r.zscore(k.trials, "t1") == -expires  # minus its purge time
    assert r.hmget(k.meta, "version", "labelled") == [b"1", b"1"]

    def refused(items: list[tuple[str, int]]) -> Any:
        fixed = [*k.all_fixed(), *(k.trial(INC, t) for t, _ in items)]
        args: list[Any] = [INC, position(1, "", "s9"), b"", 10]
        for t, y in items:
            args += [t, y]
        return refuses(r, redis_prefix, "LABEL", fixed, args)

    assert refused([("t1", 0)])[4] == [[b"repeat", b"1", b"1", b""]]
    assert refused([("t1", 1)])[4] == [[b"conflict", b"0"]]
    assert refused([("t9", 1)])[4] == [[b"unknown"]]
    assert refused([("t2", 2)])[4] == [[b"invalid"]]
    assert refused([("t2", -1)])[4] == [[b"invalid"]]
    # a folded outcome reaches the labelled trial
    call(r, "SYNC", [*k.all_fixed(), k.trial(INC, "t1")], [INC, "1", fold(1, [(0, 1, 1, "t1")]), 0])
    assert re.fullmatch(rb"1:0:\d+:0:1:1:0:", r.get(k.trial(INC, "t1")))
    assert refused([("t1", 0)])[4] == [[b"repeat", b"1", b"1", b"1"]]


def test_a_late_label_writes_only_its_count(r: redis.Redis, redis_prefix: str, k: Keys) -> None:
    model(r, k)
    predict(r, k, [("t1", x(1), 1)], ttl=1, most=10)
    time.sleep(0.01)
    before = state(r, redis_prefix)
    assert label(r, k, [("t1", 0)])[4] == [[b"expired"]]
    after = state(r, redis_prefix)
    assert r.hmget(k.meta, "late_labels", "expired", "version") == [b"1", b"1", b"0"]
    assert {key for key in after if after[key] != before[key]} == {
        k.meta.encode(),
        k.trials.encode(),
    }


def test_a_trial_not_of_the_scripts_refuses_the_call_whole(
    r: redis.Redis, redis_prefix: str, k: Keys
) -> None:
    model(r, k)
    predict(r, k, [("t0", x(0), 1)])
    r.set(k.trial(INC, "t1"), b"1:0:nope")
    before = state(r, redis_prefix)
    trials = [k.trial(INC, "t0"), k.trial(INC, "t1"), k.trial(INC, "t2")]
    calls = [
        ("LABEL", trials[:2], [INC, "0", b"", 1, "t0", 0, "t1", 0]),
        ("PREDICT", trials[2:0:-1], [INC, "0", "0", 1, b"", 0, 10, "t2", x(2), 0, SCORES]),
    ]
    calls[1][2].extend(["t1", x(1), 0, SCORES])
    for name, keys, args in calls:
        with pytest.raises(redis.ResponseError, match=r"^CORRUPT the trial"):
            call(r, name, [*k.all_fixed(), *keys], args)
        assert state(r, redis_prefix) == before, name


def test_learn(r: redis.Redis, redis_prefix: str, k: Keys) -> None:
    model(r, k)
    got = learn(r, k, 2, idem="i", h="h")
    assert got == [b"ok", 2, 0, [], [[b"ok", 1]]]
    log = r.xrange(k.log)
    assert [e[0] for e in log] == [b"1-0", b"2-0"]
    assert log[1][1] == {b"k": b"n", b"x": x(1), b"y": b"1", b"i": b"i", b"w": b"s2"}
    assert r.hgetall(k.idem("i")) == {
        b"op": b"learn",
        b"h": b"h",
        b"a": b"1",
        b"n": b"2",
        b"inc": INC.encode(),
    }
    assert r.hmget(k.meta, "version", "learned") == [b"2", b"2"]

    def refused(n: int, data: bytes, y: int, idem: str = "", h: str = "") -> Any:
        keys = [*k.all_fixed(), *([k.idem(idem)] if idem else [])]
        args = [INC, position(2, "", "s3"), b"", 10, LIFE, idem, h, n, *([data, y] * n)]
        return refuses(r, redis_prefix, "LEARN", keys, args)

    assert refused(1, x(0), 0, "i", "h")[4] == [[b"repeat", b"1", b"2", INC.encode(), b""]]
    assert refused(1, x(0), 0, "i", "other")[4] == [[b"mismatch"]]
    assert refused(1, x(0), 5) == [b"invalid", 1, 1]
    assert refused(2, b"Z" + b"\x00" * 12, 0) == [b"invalid", 1, 1]
    args = [INC, "5", b"", 10, LIFE, "", "", 1, x(0), 0]
    assert refuses(r, redis_prefix, "LEARN", k.all_fixed(), args) == [b"reload"]


def test_sync(r: redis.Redis, redis_prefix: str, k: Keys) -> None:
    model(r, k)
    learn(r, k, 10)
    got = call(r, "SYNC", k.all_fixed(), [INC, "7", fold(1, [(0, 1, 1, "")] * 10), 2])
    assert got[:3] == [b"ok", 10, 10] and [e[0] for e in got[3]] == [b"8-0", b"9-0"]
    meta = r.hgetall(k.meta)
    assert (meta[b"folded"], meta[b"mistakes"], meta[b"updates"], meta[b"c:0:1"]) == (
        b"10",
        b"10",
        b"10",
        b"10",
    )
    assert r.lrange(k.window, 0, -1) == [b"10:10"] and r.lrange(k.curve, 0, -1)[-1] == b"10:10"
    # outcomes folded already are ignored; a caller beyond the log, or of another
    # incarnation, or whose entry has another stamp, changes nothing
    again = [INC, "10", fold(1, [(1, 1, 1, "")] * 10), 2]
    assert refuses(r, redis_prefix, "SYNC", k.all_fixed(), again)[:3] == [b"ok", 10, 10]
    assert refuses(r, redis_prefix, "SYNC", k.all_fixed(), [INC, "11", b"", 2]) == [b"reload"]
    bad = [INC, position(3, "other"), b"", 2]
    assert refuses(r, redis_prefix, "SYNC", k.all_fixed(), bad) == [b"reload"]
    assert refuses(r, redis_prefix, "SYNC", k.all_fixed(), ["ffff", "0", b"", 2]) == [b"gone"]


def test_snapshot(r: redis.Redis, redis_prefix: str, k: Keys) -> None:
    model(r, k)
    learn(r, k, 6)
    args = [INC, position(4, "s2"), b"state", b"", 2, b""]
    # outcomes up to the version not folded yet
    assert refuses(r, redis_prefix, "SNAPSHOT", k.all_fixed(), args) == [b"unfolded", 0]
    # the entry at the version is not the one the state was learned from
    bad = [INC, position(4, "other"), b"state", b"", 2, b""]
    assert refuses(r, redis_prefix, "SNAPSHOT", k.all_fixed(), bad) == [b"reload"]
    args[3] = fold(1, [(0, 0, 0, "")] * 4)
    assert call(r, "SNAPSHOT", k.all_fixed(), args) == [b"ok", 4, 4]
    assert r.hgetall(k.snapshot) == {b"version": b"4", b"state": b"state", b"w": b"s2", b"c": b""}
    # trimmed to the snapshot's entry, the last 2 kept at least
    assert [e[0] for e in r.xrange(k.log)] == [b"4-0", b"5-0", b"6-0"]
    older = [INC, position(3, ""), b"old", b"", 2, b""]
    assert refuses(r, redis_prefix, "SNAPSHOT", k.all_fixed(), older) == [b"ok", 4, 4]


def test_import(r: redis.Redis, redis_prefix: str, k: Keys) -> None:
    model(r, k)
    learn(r, k, 2)
    keys = [*k.all_fixed(), k.idem("i")]

    def args(known: int, h: str, folded: bytes = b"") -> list[Any]:
        return [
            INC,
            position(known, "", "s5"),
            b"new",
            folded,
            10,
            h,
            LIFE,
            b"",
            "imported",
            "import",
        ]

    # not current: catch up (the entries after known), nothing written
    stale = refuses(r, redis_prefix, "IMPORT", keys, args(1, "h"))
    assert stale[:3] == [b"stale", 2, 0] and [e[0] for e in stale[3]] == [b"2-0"]
    # current but not folded up to it
    assert refuses(r, redis_prefix, "IMPORT", keys, args(2, "h"))[0] == b"stale"
    assert call(r, "IMPORT", keys, args(2, "h", fold(1, [(0, 0, 0, "")] * 2))) == [b"ok", 3]
    assert r.xrange(k.log)[-1] == (b"3-0", {b"k": b"r", b"w": b"s5"})
    snap = r.hgetall(k.snapshot)
    assert (snap[b"version"], snap[b"state"], snap[b"p_version"], snap[b"p_until"]) == (
        b"3",
        b"new",
        b"0",
        b"3",
    )
    assert r.hmget(k.meta, "version", "folded", "imports") == [b"3", b"3", b"1"]
    assert orjson.loads(r.hget(k.meta, "marks")) == [[3, "imported"]]
    assert r.hmget(k.idem("i"), "op", "a") == [b"import", b"3"]
    assert refuses(r, redis_prefix, "IMPORT", keys, args(0, "h")) == [b"repeat", b"3", INC.encode()]
    assert refuses(r, redis_prefix, "IMPORT", keys, args(3, "other")) == [b"mismatch"]


def test_change(r: redis.Redis, redis_prefix: str, k: Keys) -> None:
    model(r, k)
    keys = [*k.all_fixed(), k.meta]

    def args(checked: bytes, known: int = 0) -> list[Any]:
        space = b'{"labels":["a","b","c"]}'
        return [
            INC,
            position(known, "", "s6"),
            b'{"c":1}',
            b"",
            10,
            "",
            LIFE,
            space,
            3,
            8,
            checked,
            "3 labels",
        ]

    # checked against another input than the model's: catch up and check again
    assert refuses(r, redis_prefix, "CHANGE", keys, args(b'{"labels":[]}'))[0] == b"stale"
    assert call(r, "CHANGE", keys, args(b"")) == [b"ok", 1]
    assert r.xrange(k.log) == [(b"1-0", {b"k": b"c", b"c": b'{"c":1}', b"w": b"s6"})]
    assert r.hmget(k.meta, "version", "k", "n", "changes") == [b"1", b"3", b"8", b"1"]
    assert r.hget(k.meta, "input") == b'{"labels":["a","b","c"]}'
    assert refuses(r, redis_prefix, "CHANGE", keys, args(b"", 1))[0] == b"stale"


def test_summary(r: redis.Redis, redis_prefix: str, k: Keys) -> None:
    model(r, k)
    assert call(r, "SUMMARY", k.all_fixed(), [INC, 5, b'{"s":1}']) == [b"ok"]
    assert r.hgetall(k.summary) == {b"version": b"5", b"doc": b'{"s":1}'}
    assert refuses(r, redis_prefix, "SUMMARY", k.all_fixed(), [INC, 4, b"{}"]) == [b"ok"]
    assert refuses(r, redis_prefix, "SUMMARY", k.all_fixed(), ["ffff", 9, b"{}"]) == [b"gone"]


def test_stats_reads_and_writes_nothing(r: redis.Redis, redis_prefix: str, k: Keys) -> None:
    model(r, k)
    predict(r, k, [("t2", x(2), 1)])
    predict(r, k, [("t1", x(1), 1)], ttl=1)  # the last call that sweeps
    time.sleep(0.01)
    learn(r, k, 10)
    call(r, "SYNC", k.all_fixed(), [INC, "10", fold(1, [(0, 0, 0, "")] * 10), 0])
    call(r, "SUMMARY", k.all_fixed(), [INC, 10, b"{}"])
    got = refuses(r, redis_prefix, "STATS", k.all_fixed(), [now_ms(), ""])
    status, meta, pending, overdue, curve, window, sv, doc, mark = got
    assert status == b"ok" and dict(zip(meta[::2], meta[1::2], strict=True))[b"version"] == b"10"
    assert (pending, overdue) == (1, 1)  # t1 past its deadline, not swept yet
    assert curve[-1] == b"10:0" and window == [1, b"10:0", b"10:0"]
    assert (sv, doc) == (b"10", b"{}") and mark.startswith(INC.encode() + b"/1/")
    assert refuses(r, redis_prefix, "STATS", k.all_fixed(), [now_ms(), mark])[4] == b"same"
    assert refuses(r, redis_prefix, "STATS", [f"{k.meta}-none", *k.all_fixed()[1:]], [0, ""]) == [
        b"gone"
    ]


def test_job_create_and_cancel(r: redis.Redis, redis_prefix: str) -> None:
    key = job_key(redis_prefix, "0" * 32)
    assert call(r, "JOB_CREATE", [key], [b'{"a":1}', "d", LIFE]) is None
    assert r.hgetall(key) == {b"doc": b'{"a":1}', b"digest": b"d"}
    assert 0 < r.pttl(key) <= LIFE
    # the id is taken: the job there, nothing written
    got = refuses(r, redis_prefix, "JOB_CREATE", [key], [b'{"b":2}', "e", 1])
    assert got == [b'{"a":1}', b"d"]
    assert call(r, "JOB_CANCEL", [key], []) == b'{"a":1}'
    assert r.hget(key, "cancel") == b"1"
    none = job_key(redis_prefix, "1" * 32)
    assert refuses(r, redis_prefix, "JOB_CANCEL", [none], []) is None


def test_a_trial_kept_as_a_hash_is_labelled(r: redis.Redis, k: Keys) -> None:
    model(r, k)
    deadline = now_ms() + 60_000
    key = k.trial(INC, "t1")
    r.hset(key, mapping={"x": x(1), "p": 1, "s": SCORES, "v": 0, "d": deadline})
    r.pexpireat(key, deadline + 60_000)
    r.zadd(k.trials, {"t1": deadline})
    assert label(r, k, [("t1", 0)])[4] == [[b"ok", b"1", 1, x(1), b"0"]]
    assert r.get(key) == b"1:0:%d:0:1::0:" % deadline
    assert r.pexpiretime(key) == deadline + 60_000
