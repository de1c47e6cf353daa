"""TLS on both legs, end to end: ``committee serve --tls-cert --tls-key`` answers HTTPS
(and the stream WSS) while it keeps its models in a Redis it reaches over ``rediss://``
with a client certificate."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from _procs import Service
from _tls import TlsRedis, make_certificates
from websockets.asyncio.client import connect

# seconds for the stream's TLS and WebSocket handshakes and its answer: the asyncio client,
# whose every wait the event loop bounds (a failed handshake of the threaded client may
# leave it joining its reader thread)
WSS_TIMEOUT = 90.0


async def _predict_over_wss(url: str, trust: ssl.SSLContext) -> dict[str, Any]:
    async with connect(url, ssl=trust, open_timeout=WSS_TIMEOUT) as ws:
        await ws.send(
            json.dumps({"op": "predict", "id": 1, "instance": {"features": [1, 0, 1, 0]}})
        )
        answer: dict[str, Any] = json.loads(await ws.recv())
        return answer


def test_https_service_over_a_tls_redis(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    trust = ssl.create_default_context(cafile=str(certs.ca))
    tls = ["--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
    with (
        TlsRedis(tmp_path, certs) as redis_tls,
        Service(tmp_path, redis_url=redis_tls.url(), args=tls, verify=trust) as svc,
    ):
        assert svc.url.startswith("https://")
        model = {
            "name": "secure",
            "labels": ["a", "b"],
            "input": {"attributes": {"n_features": 4}},
            "learner": {"kind": "winnow"},
        }
        with httpx.Client(base_url=svc.url, verify=trust, timeout=30) as c:
            assert c.get("/readyz").status_code == 200
            assert c.post("/v1/models", json=model).status_code == 201
            learned = c.post(
                "/v1/models/secure/learn",
                json={"instance": {"features": [1, 0, 1, 0]}, "label": "b"},
            )
            assert learned.status_code == 200, learned.text
            assert c.get("/v1/models/secure").json()["version"] == 1
        url = svc.url.replace("https://", "wss://") + "/v1/models/secure/stream"
        answer = asyncio.run(asyncio.wait_for(_predict_over_wss(url, trust), WSS_TIMEOUT))
        assert answer["result"]["label"] in ("a", "b")
        # plain HTTP to the TLS port gets nothing it can read
        with pytest.raises(httpx.HTTPError):
            httpx.get(svc.url.replace("https://", "http://") + "/healthz", timeout=5)
        # a client that does not trust the test CA refuses the service's certificate
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{svc.url}/healthz", timeout=5)


def test_a_certificate_without_its_key_is_refused(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "serve", "--tls-cert", str(tmp_path / "c.pem")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert run.returncode == 2 and "--tls-cert and --tls-key go together" in run.stderr
