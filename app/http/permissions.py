"""Who may call each route, declared where the route is defined.

Every endpoint carries an :class:`Access` (:func:`access`, a decorator under the route's
own): the scope a key needs, the path parameter that names the model whose tenancy
applies, and, for admin actions, the name the audit log gives them. :class:`RouteTable`
reads these declarations from the app's routes once; the guard finds a request's route
in it before anything else reads the request, the fast path serves the route the guard
found, and the OpenAPI document lists each operation's security from the same
declarations. A route without a declaration fails the app's build and its start-up, and
a path no route serves is refused by the guard: nothing is open by omission.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import fastapi.routing
from starlette.routing import BaseRoute

__all__ = [
    "ADMIN",
    "ADMIN_ALL",
    "OPEN",
    "READ",
    "WRITE",
    "Access",
    "Found",
    "RouteTable",
    "UndeclaredRoute",
    "access",
    "declared",
    "flat_routes",
    "found_route",
]

Scope = Literal["read", "write", "admin", "admin-all"]
OPEN: None = None  # anyone, auth on or off
READ: Scope = "read"
WRITE: Scope = "write"
ADMIN: Scope = "admin"
ADMIN_ALL: Scope = "admin-all"  # admin, on every model: keys and the audit log
_RANK = {OPEN: 0, READ: 1, WRITE: 2, ADMIN: 3, ADMIN_ALL: 4}

E = TypeVar("E", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Access:
    """What a route asks of the key that calls it."""

    scope: Scope | None  # None: open to all
    model: str | None = None  # the path parameter naming the model the key must see
    action: str | None = None  # an admin action's name in the audit log


def access(
    scope: Scope | None, *, model: str | None = None, action: str | None = None
) -> Callable[[E], E]:
    """Declare who may call the endpoint it decorates (place it under the route's
    decorator, so the route registers the declared function)."""
    declared_access = Access(scope, model, action)

    def mark(endpoint: E) -> E:
        setattr(endpoint, "access", declared_access)  # noqa: B010 (an attribute of a function)
        return endpoint

    return mark


def declared(route: BaseRoute) -> Access | None:
    """The route's declaration, if its endpoint has one."""
    got = getattr(getattr(route, "endpoint", None), "access", None)
    return got if isinstance(got, Access) else None


def found_route(scope: MutableMapping[str, Any]) -> Found | None:
    """The route an ASGI request is for (found once, then kept in its scope), by the route
    table :func:`app.http.main.create_app` keeps in the app's state."""
    if "committee.route" not in scope:
        table: RouteTable = scope["app"].state.routes
        websocket = scope["type"] == "websocket"
        method = "GET" if websocket else scope["method"]
        scope["committee.route"] = table.find(method, scope["path"], websocket)
    found: Found | None = scope["committee.route"]
    return found


def flat_routes(routes: Iterable[BaseRoute]) -> list[Any]:
    """The app's routes one by one, with the routes of included routers in their place
    (recent FastAPI keeps an included router whole in ``app.routes``)."""
    contexts = getattr(fastapi.routing, "iter_route_contexts", None)
    return list(routes) if contexts is None else list(contexts(list(routes)))


class UndeclaredRoute(RuntimeError):
    """A route whose endpoint does not declare who may call it."""


@dataclass(frozen=True, slots=True)
class Found:
    """The route a request is for: its declaration, the model its path names (if the
    declaration names one), its path as declared, and the route (None when the path is
    served but not for this method: the app answers 405)."""

    access: Access
    model: str | None
    path: str
    route: BaseRoute | None


@dataclass(frozen=True, slots=True)
class _Entry:
    route: BaseRoute
    access: Access
    path: str
    segments: tuple[str | None, ...]  # a literal, or None for a parameter
    params: dict[int, str]  # the parameters' positions
    tail: bool  # its last parameter takes the rest of the path ({p:path})
    methods: frozenset[str] | None  # None: a WebSocket
    websocket: bool


class RouteTable:
    """The app's routes by their path's segments, each with its declaration."""

    def __init__(self, routes: Iterable[BaseRoute]) -> None:
        self._by_length: dict[int, list[_Entry]] = {}
        self._tails: list[_Entry] = []
        missing = []
        for route in flat_routes(routes):
            path = getattr(route, "path", None)
            if not isinstance(path, str):
                missing.append(repr(route))
                continue
            got = declared(route)
            methods = getattr(route, "methods", None)
            if got is None:
                missing.append(f"{' '.join(sorted(methods or {'WEBSOCKET'}))} {path}")
                continue
            entry = _entry(route, got, path, methods)
            if entry.tail:
                self._tails.append(entry)
            else:
                self._by_length.setdefault(len(entry.segments), []).append(entry)
        if missing:
            raise UndeclaredRoute(
                "routes that declare no access (decorate the endpoint with "
                f"app.http.permissions.access): {', '.join(missing)}"
            )

    def find(self, method: str, path: str, websocket: bool = False) -> Found | None:
        """The route that serves ``method`` on ``path``, the first in the app's order as
        the router's own matching has it; else, if routes serve the path for other
        methods, the strictest of their declarations (the app answers 405); else None."""
        parts = path.split("/")
        other: _Entry | None = None
        other_parts: list[str] = parts
        for entry in self._by_length.get(len(parts), ()):
            if entry.websocket != websocket or not _fits(entry, parts):
                continue
            if websocket or method in entry.methods:  # type: ignore[operator]
                return _found(entry, parts, entry.route)
            if other is None or _RANK[entry.access.scope] > _RANK[other.access.scope]:
                other = entry
        for entry in self._tails:
            n = len(entry.segments)
            if len(parts) < n or entry.websocket != websocket:
                continue
            head = [*parts[: n - 1], "/".join(parts[n - 1 :])]
            if not _fits(entry, head):
                continue
            if websocket or method in entry.methods:  # type: ignore[operator]
                return _found(entry, head, entry.route)
            if other is None or _RANK[entry.access.scope] > _RANK[other.access.scope]:
                other, other_parts = entry, head
        return None if other is None else _found(other, other_parts, None)


def _entry(route: BaseRoute, got: Access, path: str, methods: Any) -> _Entry:
    segments: list[str | None] = []
    params: dict[int, str] = {}
    tail = False
    for i, part in enumerate(path.split("/")):
        if part.startswith("{") and part.endswith("}"):
            name, _, convert = part[1:-1].partition(":")
            params[i] = name
            segments.append(None)
            tail = convert == "path"
        else:
            segments.append(part)
    if got.model is not None and got.model not in params.values():
        raise UndeclaredRoute(
            f"{path}: its access names the model by {got.model!r}, not a parameter"
        )
    return _Entry(
        route,
        got,
        path,
        tuple(segments),
        params,
        tail,
        None if methods is None else frozenset(methods),
        methods is None,
    )


def _fits(entry: _Entry, parts: list[str]) -> bool:
    for want, part in zip(entry.segments, parts, strict=True):
        if want is None:
            if not part:
                return False
        elif want != part:
            return False
    return True


def _found(entry: _Entry, parts: list[str], route: BaseRoute | None) -> Found:
    model = None
    if entry.access.model is not None:
        model = next(parts[i] for i, p in entry.params.items() if p == entry.access.model)
    return Found(entry.access, model, entry.path, route)
