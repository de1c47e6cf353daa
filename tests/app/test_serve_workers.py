"""``committee serve --workers N``: the workers are forked from a parent that imported the
app and warmed its kernels once, and each is still a process of its own: its own name,
its own write stamps, its own stop on SIGTERM; the metrics count every worker's."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
from _procs import Service, learn_some, majority_model, majority_payloads
from _workers import from_each_worker
from harness.redis_cluster import sync_client

from storage.keys import Keys

WORKERS = 3
STAMP_PREFIX = 12  # hex characters of a process's stamp prefix (storage.store.calls)


@pytest.fixture
def service(tmp_path: Path, redis_url: str, redis_prefix: str) -> Service:
    return Service(
        tmp_path, workers=WORKERS, redis_url=redis_url, prefix=redis_prefix, log_level="info"
    )


def test_workers_are_forked_warm_and_each_is_its_own(
    service: Service, redis_url: str, redis_prefix: str
) -> None:
    name = "majority"
    data = iter(majority_payloads(400, np.random.default_rng(3)))
    with service as svc, httpx.Client(base_url=svc.url, timeout=60) as c:
        assert c.post("/v1/models", json=majority_model(name)).status_code == 201
        # the kernels were warmed once, in the parent, not once per worker
        assert svc.output(0).count("kernels warm in") == 1, svc.output(0)
        serve = Path(f"/proc/{svc.pid}/cmdline").read_bytes()
        pids = svc.worker_pids()
        assert len(pids) == WORKERS
        assert all(Path(f"/proc/{p}/cmdline").read_bytes() == serve for p in pids)  # forks

        # each worker names itself and writes its own stamps
        with httpx.Client(base_url=svc.url, timeout=60, headers={"Connection": "close"}) as each:
            for _ in range(8):
                learn_some(each, name, data, 8)
            names = from_each_worker(WORKERS, lambda: each.get("/healthz"))
        assert len(names) == WORKERS
        with sync_client(redis_url) as r:
            entries = r.xrange(Keys(redis_prefix, name).log, "-", "+")
        prefixes = {fields[b"w"][:STAMP_PREFIX] for _, fields in entries}
        assert len(prefixes) > 1, prefixes

        # one scrape counts the requests every worker answered
        metrics = c.get("/metrics").text
        answered = sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("committee_request_duration_seconds_count{")
            and 'route="/v1/models/{name}/learn"' in line
        )
        assert answered >= 8 * 4
    assert svc.process is not None and svc.process.returncode == 0
