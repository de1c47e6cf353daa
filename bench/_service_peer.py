"""The peer of ``bench/service.py``: an empty FastAPI app with one small JSON endpoint.

It does what every request to the service does at the edge (parse and validate a JSON
body into a pydantic model, serialise a pydantic answer) and nothing else, so its
throughput under the same server and load is the ceiling the service is compared with.
Served as ``uvicorn _service_peer:app --app-dir bench``.
"""

from __future__ import annotations

from fastapi import FastAPI
from pydantic import BaseModel

app = FastAPI(title="empty endpoint")


class PingCreate(BaseModel):
    name: str
    value: float


class PingPublic(BaseModel):
    name: str
    ok: bool


@app.post("/ping")
async def ping(body: PingCreate) -> PingPublic:
    return PingPublic(name=body.name, ok=body.value >= 0)
