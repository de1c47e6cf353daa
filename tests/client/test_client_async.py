"""The asyncio client and stream against the real service."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from _clientkit import FUSION, SPARSE
from _server import free_port

from committee_client import (
    AsyncClient,
    BatchItem,
    Conflict,
    ConnectionFailed,
    InvalidInput,
    Labelled,
    Learned,
    Model,
    NotFound,
    Prediction,
    Retry,
    State,
    Stats,
)

QUICK = Retry(attempts=3, backoff=0.01, max_delay=0.05, jitter=0)


def votes(rng: np.random.Generator) -> dict[str, Any]:
    return {e: {y: float(rng.random()) for y in FUSION["labels"]} for e in ("cnn", "svm", "knn")}


def test_every_call(service_url: str, name: str) -> None:
    async def main() -> None:
        async with AsyncClient(service_url, retry=QUICK, headers={"x-test": "1"}) as c:
            assert await c.alive() and await c.ready()
            assert any(k.kind == "committee" for k in await c.learners())
            m = await c.create_model(name, **FUSION)
            assert isinstance(m, Model) and m.name == name
            assert name in [x.name for x in await c.models()]
            assert await c.model(name) == m
            with pytest.raises(Conflict):
                await c.create_model(name, **FUSION)
            p = await c.predict(name, {"experts": {"cnn": "dog"}})
            assert isinstance(p, Prediction) and p.label == "dog" and p.trial_id
            got = await c.label(name, p.trial_id, "cat")
            assert isinstance(got, Labelled) and got.mistake
            assert await c.label(name, p.trial_id, "cat") == got
            learned = await c.learn(name, {"experts": {"svm": "bird"}}, "bird")
            assert isinstance(learned, Learned)
            rng = np.random.default_rng(0)
            preds = await c.predict_batch(name, [{"experts": votes(rng)} for _ in range(3)])
            assert all(isinstance(o, BatchItem) and o.ok for o in preds)
            pairs = [(o.unwrap().trial_id or "", "dog") for o in preds]
            assert all(o.ok for o in await c.label_batch(name, pairs))
            items = [({"experts": votes(rng)}, "cat") for _ in range(3)]
            assert all(o.ok for o in await c.learn_batch(name, items))
            state = await c.state(name)
            assert isinstance(state, State) and state.model_version == 8
            assert (await c.put_state(name, state)).model_version == 9
            assert isinstance(await c.stats(name), Stats)
            with pytest.raises(InvalidInput) as e:
                await c.learn(name, {"experts": {"ghost": "cat"}}, "cat")
            assert e.value.field == "instance"
            m = await c.change_experts(name, add=["vit"], retire=["knn"])
            assert m.input["experts"]["retired"] == ["knn"] and m.version == 10
            m = await c.add_labels(name, ["fox"])
            assert m.labels == ["cat", "dog", "bird", "fox"]
            assert (await c.learn(name, {"experts": {"vit": "fox"}}, "fox")).predicted == "fox"
            with pytest.raises(InvalidInput, match="retired"):
                await c.learn(name, {"experts": {"knn": "cat"}}, "cat")
            with pytest.raises(InvalidInput) as e:
                await c.add_features(name, ["colour"])
            assert e.value.field == "features"
            await c.delete_model(name)
            with pytest.raises(NotFound):
                await c.model(name)

    asyncio.run(main())


def test_concurrent_predictions(service_url: str, name: str) -> None:
    async def main() -> None:
        async with AsyncClient(service_url) as c:
            await c.create_model(name, **SPARSE)
            xs = [{"features": {str(i): 1.0}} for i in range(30)]
            got = await asyncio.gather(*(c.predict(name, x) for x in xs))
            assert len({p.trial_id for p in got}) == 30
            assert (await c.model(name)).counters.predictions == 30

    asyncio.run(main())


def test_refused_connections_are_retried() -> None:
    async def main() -> None:
        async with AsyncClient(f"http://127.0.0.1:{free_port()}", retry=QUICK) as c:
            with pytest.raises(ConnectionFailed) as e:
                await c.learn("m", {}, 1)
            assert e.value.sent is False
            assert not await c.alive()

    asyncio.run(main())


def test_stream(service_url: str, name: str) -> None:
    async def main() -> None:
        async with AsyncClient(service_url) as c:
            await c.create_model(name, **FUSION)
            async with c.stream(name, window=8) as s:
                p = await s.predict({"experts": {"cnn": "dog"}})
                assert isinstance(p, Prediction) and p.label == "dog" and p.trial_id
                assert await s.predict({"experts": {"cnn": "dog"}}, trial_id=p.trial_id) == p
                untracked = await s.predict({"experts": {"knn": "cat"}}, track=False)
                assert untracked.trial_id is None
                got = await s.label(p.trial_id, "cat")
                assert isinstance(got, Labelled) and got.mistake
                with pytest.raises(Conflict):
                    await s.label(p.trial_id, "bird")
                with pytest.raises(NotFound):
                    await s.label("nope", "bird")
                with pytest.raises(InvalidInput) as e:
                    await s.learn({"experts": {"ghost": "cat"}}, "cat")
                assert e.value.field == "instance"
                assert isinstance(await s.learn({"experts": {"svm": "bird"}}, "bird"), Learned)
                # several tasks at once on one stream, each gets its own answer
                xs = [{"experts": {"cnn": y}} for y in ("cat", "dog", "bird") * 5]
                got_many = await asyncio.gather(*(s.predict(x, track=False) for x in xs))
                assert [q.label for q in got_many] == [x["experts"]["cnn"] for x in xs]
                rng = np.random.default_rng(1)
                items: list[tuple[dict[str, Any], Any]] = [
                    ({"experts": votes(rng)}, "dog") for _ in range(100)
                ]
                items[50] = ({"experts": votes(rng)}, "horse")
                learned = await s.learn_many(items)
                assert len(learned) == 100 and [o.ok for o in learned].count(False) == 1
                assert learned[50].error is not None and learned[50].error.field == "label"
                preds = await s.predict_many([{"experts": votes(rng)} for _ in range(20)])
                labels = await s.label_many([(o.unwrap().trial_id or "", "cat") for o in preds])
                assert all(o.ok for o in labels)
            rest = await c.learn_batch(name, [({"experts": votes(rng)}, "dog")])
            assert rest[0].ok
            assert (await c.model(name)).counters.learned == 1 + 99 + 1

    asyncio.run(main())


def test_stream_errors(service_url: str) -> None:
    async def main() -> None:
        async with AsyncClient(service_url) as c, c.stream("ghost") as s:
            with pytest.raises(NotFound, match="ghost"):
                await s.predict({})
            with pytest.raises(NotFound):  # and every call after
                await s.learn({}, 1)
        async with AsyncClient(f"http://127.0.0.1:{free_port()}") as c:
            with pytest.raises(ConnectionFailed) as e:
                async with c.stream("m"):
                    pass
            assert e.value.sent is False
        with pytest.raises(ValueError, match="window"):
            AsyncClient(service_url).stream("m", window=0)

    asyncio.run(main())


def test_backtest_async(service_url: str, name: str) -> None:
    async def main() -> None:
        async with AsyncClient(service_url) as c:
            await c.create_model(name, **FUSION)
            await c.learn(name, {"experts": {"cnn": "dog"}}, "dog")
            job = await c.backtest(name, {"kind": "committee", "alpha": 2.0}, wait=0)
            ended = await c.wait_job(job.id, timeout=60, every=0.05)
            assert ended.status == "done" and ended.result is not None
            assert ended.result.candidates[0].trials == 1
            assert (await c.cancel_job(job.id)).status == "done"

    asyncio.run(main())


def test_admin_operations_over_an_async_stream(service_url: str, name: str) -> None:
    async def main() -> None:
        async with AsyncClient(service_url) as c:
            await c.create_model(name, **FUSION)
            async with c.stream(name) as s:
                await s.learn({"experts": {"cnn": "dog"}}, "dog")
                grown = await s.change_experts(add=["vit"])
                assert grown.input["experts"]["expert_names"][-1] == "vit"
                assert (await s.add_labels(["fox"])).labels[-1] == "fox"
                assert (await s.rollback(1)).version == 4
                job = await s.backtest({"kind": "committee", "alpha": 2.0}, wait=0)
                assert job.running
            ended = await c.wait_job(job.id, timeout=60, every=0.05)
            assert ended.result is not None and ended.result.candidates[0].trials == 1

    asyncio.run(main())
