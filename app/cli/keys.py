"""``committee keys create|list|revoke``: API keys from the command line.

They go to the Redis of ``--redis-url`` (``COMMITTEE_REDIS_URL``) or, when none is set,
to the private Redis in ``--data-dir``: the running service's if it runs, else one started
for the command. ``create`` prints the new key alone on standard output (so
``KEY=$(committee keys create --scope read)`` works) and what it is on standard error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.core.settings import Settings
from app.http.schemas import KeyCreate
from storage.auth import AuthStore
from storage.client import close, connect
from storage.errors import StorageError
from storage.server import EmbeddedRedis, RedisServerError, running_url

CLI = "(command line)"


def add_parser(sub: Any) -> None:
    """Add ``keys`` to the CLI's subcommands."""
    p = sub.add_parser("keys", help="make, list and revoke API keys")
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--redis-url", help="[COMMITTEE_REDIS_URL; else the private Redis]")
    where.add_argument("--data-dir", type=Path, help="[COMMITTEE_DATA_DIR, committee-data]")
    where.add_argument("--key-prefix", help="[COMMITTEE_KEY_PREFIX, committee]")
    keys = p.add_subparsers(dest="keys_command", required=True)
    c = keys.add_parser("create", parents=[where], help="make a key and print it (once)")
    c.add_argument("--scope", required=True, choices=("read", "write", "admin"))
    c.add_argument("--models", default="*", help="glob of the models it reaches [*]")
    c.add_argument("--name", default="", help="what the key is for")
    c.add_argument("--requests-per-second", type=float, help="[the scope's default]")
    c.add_argument("--trials-per-second", type=float, help="[the scope's default]")
    c.add_argument("--burst", type=float, help="seconds of its rate at once [rate_burst]")
    c.add_argument("--max-models", type=int, help="models it may make [max_models_per_key]")
    c.set_defaults(func=create)
    ls = keys.add_parser("list", parents=[where], help="every key, without its secret")
    ls.add_argument("--json", action="store_true", help="one JSON document")
    ls.set_defaults(func=list_keys)
    r = keys.add_parser("revoke", parents=[where], help="revoke a key by its id")
    r.add_argument("id")
    r.set_defaults(func=revoke)


def _settings(args: argparse.Namespace) -> Settings:
    given = {
        k: getattr(args, k)
        for k in ("redis_url", "data_dir", "key_prefix")
        if getattr(args, k) is not None
    }
    return Settings(**given)


@contextlib.contextmanager
def _redis(settings: Settings) -> Iterator[str]:
    """The Redis URL to use, starting the private Redis for the command if none runs."""
    if settings.redis_url:
        yield settings.redis_url
        return
    url = running_url(settings.data_dir)
    if url is not None:
        yield url
        return
    with EmbeddedRedis(settings.data_dir) as server:
        yield server.url


def _run(args: argparse.Namespace, work: Any) -> int:
    try:
        settings = _settings(args)
        with _redis(settings) as url:

            async def main() -> int:
                clients = connect(url)
                try:
                    rc: int = await work(
                        AuthStore(clients, settings.key_prefix, settings.audit_max)
                    )
                    return rc
                finally:
                    await close(clients)

            return asyncio.run(main())
    except (ValidationError, ValueError) as e:
        print(f"committee keys: {e}", file=sys.stderr)
        return 2
    except (StorageError, RedisServerError) as e:
        print(f"committee keys: {e}", file=sys.stderr)
        return 1


def create(args: argparse.Namespace) -> int:
    limits = {
        k: v
        for k in ("requests_per_second", "trials_per_second", "burst", "max_models")
        if (v := getattr(args, k)) is not None
    }
    try:
        body = KeyCreate.model_validate(
            {
                "scope": args.scope,
                "models": args.models,
                "name": args.name,
                "limits": limits or None,
            }
        )
    except ValidationError as e:
        print(f"committee keys: {e}", file=sys.stderr)
        return 2
    own = body.limits.model_dump(exclude_none=True) if body.limits else {}

    async def work(store: AuthStore) -> int:
        key, secret = await store.create(body.scope, body.models, body.name, own)
        await store.audit(None, CLI, "create key", None, 201, f"key {key.id}: {key.scope}")
        print(secret)
        print(
            f"key {key.id}: scope {key.scope}, models {key.models!r}"
            + (f", {key.name!r}" if key.name else "")
            + " (shown once: only its hash is stored)",
            file=sys.stderr,
        )
        return 0

    return _run(args, work)


def list_keys(args: argparse.Namespace) -> int:
    async def work(store: AuthStore) -> int:
        _, keys = await store.load()
        if args.json:
            print(json.dumps({"keys": [k.public() for k in keys]}, indent=2))
            return 0
        print(f"{'id':<14} {'scope':<6} {'models':<20} {'created':<11} name")
        for k in keys:
            print(f"{k.id:<14} {k.scope:<6} {k.models:<20} {k.created:<11} {k.name}")
        return 0

    return _run(args, work)


def revoke(args: argparse.Namespace) -> int:
    async def work(store: AuthStore) -> int:
        if not await store.revoke(args.id):
            print(f"committee keys: no key with id {args.id!r}", file=sys.stderr)
            return 1
        await store.audit(None, CLI, "revoke key", None, 204, f"key {args.id}")
        print(f"revoked {args.id}", file=sys.stderr)
        return 0

    return _run(args, work)
