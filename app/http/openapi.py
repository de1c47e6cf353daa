"""The OpenAPI document as the API's contract.

FastAPI writes the document from the routes; :func:`install` completes it with what the
routes cannot say themselves:

* every error answer each operation can give, from one table (:data:`ERRORS`), with its
  body schema and headers;
* the limits that are settings (items in a batch, labels, the length of a label);
* an example model name on every ``{name}`` parameter (the example model's);
* precise schemas of a learner spec (one variant per kind of the registry) and of the
  input config, which the service checks in :mod:`models` rather than in pydantic.

It also makes every 405 name all the methods of its path in ``Allow``: Starlette names
those of the first route that matched the path only. Only 405 answers pass through that
handler, so the trial calls' fast path is untouched.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from app.core.settings import Settings
from app.http.guard import WRITE_METHODS
from app.http.permissions import Access, declared, flat_routes
from app.http.schemas import EXAMPLE_MODEL, MAX_LABEL_LENGTH, STORED_INTS
from models.core import params as mp
from models.core.learner import Spec, SpecList
from models.inputs.derived import BY, NORMALIZE
from models.registry import KINDS, describe

__all__ = ["ERRORS", "install"]

_NO_MODEL = "no model of this name"
_NO_JOB = "no job of this id (or it is a model the key does not reach, or expired)"
_BODY = "the body is larger than max_body_bytes"
_AGAIN = "the Idempotency-Key came before with another request"
_BUSY = "the worker serves max_connections requests already; try again after Retry-After seconds"
_REDIS = "Redis does not answer, or the worker is busy; try again after Retry-After seconds"
_MODEL = {404: _NO_MODEL, 422: "the name does not match its pattern", 503: _REDIS}
_TRIAL = {**_MODEL, 413: _BODY, 422: "the body or name does not fit the schema or the model"}
_PREDICT_BAD = (
    f"{_TRIAL[422]}, or explain asks it of a learner kind that cannot be explained (the "
    "message names the kind)"
)

#: The error answers of each operation beyond 503 (every operation): status -> when.
#: A 405 answers a method the path does not have, never a documented operation.
ERRORS: dict[str, dict[int, str]] = {
    "GET /healthz": {},
    "GET /readyz": {503: "Redis does not answer, or the service is warming up"},
    "GET /metrics": {503: _REDIS},
    "GET /v1/learners": {},
    "GET /v1/models": {503: _REDIS},
    "POST /v1/models": {
        404: "a fork's source model does not exist",
        409: f"the name is taken; or {_AGAIN}; or a fork's source kept changing",
        413: _BODY,
        422: "a field does not fit the schema, or the learner does not fit the input, or a "
        "fork's version is not one its source can be rebuilt at",
        429: "max_stored_models models exist",
        503: _REDIS,
    },
    "GET /v1/models/{name}/versions": _MODEL,
    "POST /v1/models/{name}/rollback": {
        **_MODEL,
        409: f"the model kept changing meanwhile; or {_AGAIN}",
        413: _BODY,
        422: "the version is not one the model can be rebuilt at",
    },
    "POST /v1/models/{name}/backtest": {
        **_MODEL,
        409: _AGAIN,
        413: _BODY,
        422: "a learner the model's input cannot feed, or a version the model cannot be "
        "replayed from, or a replay beyond backtest_max_trials or backtest_max_learners",
        429: "this worker runs backtest_jobs backtests already",
    },
    "POST /v1/models/{name}/challengers": {
        **_MODEL,
        409: f"the model kept changing meanwhile; or {_AGAIN}",
        413: _BODY,
        422: "the name is taken or malformed, or a learner the model's input cannot feed, or "
        "beyond max_challengers or max_learner_bytes",
    },
    "GET /v1/models/{name}/challengers": _MODEL,
    "GET /v1/models/{name}/alerts": _MODEL,
    "PUT /v1/models/{name}/alerts": {
        **_MODEL,
        413: _BODY,
        422: "a field does not fit the schema, or webhook_url's host matches none of "
        "alert_allowed_hosts",
    },
    "POST /v1/models/{name}/challengers/{challenger}/promote": {
        **_MODEL,
        404: f"{_NO_MODEL}, or no challenger of this name",
        409: f"the model kept changing meanwhile; or {_AGAIN}",
    },
    "DELETE /v1/models/{name}/challengers/{challenger}": {
        **_MODEL,
        404: f"{_NO_MODEL}, or no challenger of this name",
        409: f"the model kept changing meanwhile; or {_AGAIN}",
    },
    "GET /v1/models/{name}/backtest": {
        **_MODEL,
        404: f"{_NO_MODEL}, or no backtest of it is kept",
    },
    "GET /v1/jobs/{job_id}": {404: _NO_JOB, 422: "the id does not match its pattern", 503: _REDIS},
    "DELETE /v1/jobs/{job_id}": {
        404: _NO_JOB,
        422: "the id does not match its pattern",
        503: _REDIS,
    },
    "GET /v1/models/{name}": _MODEL,
    "DELETE /v1/models/{name}": {**_MODEL, 409: _AGAIN},
    "GET /v1/models/{name}/state": _MODEL,
    "PUT /v1/models/{name}/state": {
        **_MODEL,
        409: f"the model kept changing meanwhile; or {_AGAIN}",
        413: _BODY,
        422: "the state is not one of this model's learner",
    },
    "POST /v1/models/{name}/experts": {
        **_MODEL,
        409: f"other changes of the input kept coming meanwhile; or {_AGAIN}",
        413: _BODY,
        422: "a name is taken (a retired one included) or unknown, or the learner cannot "
        "take new inputs, or the model would exceed a limit",
    },
    "POST /v1/models/{name}/features": {
        **_MODEL,
        409: f"other changes of the input kept coming meanwhile; or {_AGAIN}",
        413: _BODY,
        422: "the model has no named features, a name is taken, or the learner cannot take "
        "new inputs, or the model would exceed a limit",
    },
    "POST /v1/models/{name}/labels": {
        **_MODEL,
        409: f"other changes of the input kept coming meanwhile; or {_AGAIN}",
        413: _BODY,
        422: "a label is taken or not a label, or the learner is binary or cannot take new "
        "labels, or the model would exceed a limit",
    },
    "GET /v1/models/{name}/stats": _MODEL,
    "GET /v1/models/{name}/endpoints": _MODEL,
    "GET /v1/models/{name}/events": {
        **_MODEL,
        422: "the name does not match its pattern, or Last-Event-ID (from) is not a log "
        "position or beyond the model's log, or every is below events_min_every_ms",
        503: f"{_REDIS}; or the worker has events_max_connections event streams open",
    },
    "POST /v1/models/{name}/predict": {
        **_TRIAL,
        422: _PREDICT_BAD,
        409: "trial_id is taken by another instance, or already labelled",
        429: "max_pending predictions of this model wait for their labels",
    },
    "POST /v1/models/{name}/label": {
        **_TRIAL,
        404: f"{_NO_MODEL}, or no pending trial of this id (unknown or past its deadline)",
        409: "the trial is labelled otherwise",
    },
    "POST /v1/models/{name}/learn": {**_TRIAL, 409: _AGAIN},
    # a batch answers each item's error in its 200 body
    "POST /v1/models/{name}/predict/batch": {**_TRIAL, 422: _PREDICT_BAD},
    "POST /v1/models/{name}/label/batch": _TRIAL,
    "POST /v1/models/{name}/learn/batch": {**_TRIAL, 409: _AGAIN},
    "GET /v1/models/{name}/log": {
        **_MODEL,
        409: "the model was deleted and made again while the page was read",
        422: "from is beyond the model's version, or before the first entry its log holds; "
        "or limit is beyond max_log_entries",
    },
    # a line the model refuses is answered in the 200 body, with its number
    "POST /v1/models/{name}/log": {
        **_MODEL,
        413: _BODY,
        415: "the body is not application/x-ndjson, or has a Content-Encoding",
        422: "a line is not JSON, not a line of the schema, or beyond max_import_line_bytes; "
        "the body has no line or more than max_import_lines; first_line does not start a "
        "block of 100 lines",
    },
    "GET /v1/models/{name}/log/imports/{import_id}": {
        **_MODEL,
        422: "the name or the import id does not match its pattern",
    },
    "POST /v1/keys": {413: _BODY, 422: "a field does not fit the schema", 503: _REDIS},
    "GET /v1/keys": {503: _REDIS},
    "DELETE /v1/keys/{key_id}": {
        404: "no key of this id",
        409: "the key is the one making the request, or the last admin key on every model",
        503: _REDIS,
    },
    "GET /v1/audit": {422: "limit or before does not fit", 503: _REDIS},
}
# what the guard (app.http.guard) answers, by the scope an operation needs
_GUARD = {
    400: "the Host header is not one of allowed_hosts",
    401: "auth is on and the request has no valid API key (Authorization: Bearer)",
    403: "the key's scope does not allow this operation",
    429: "the key's rate limit (requests or trials per second) or its max_models",
}
_UNSUPPORTED = "the body is not application/json, or has a Content-Encoding"
_HEADERS = "the request has more than max_headers header fields, or more than max_header_bytes"
_OTHER_TENANT = "or the model is outside the key's models"

_RETRY_AFTER = {"description": "seconds to wait", "schema": {"type": "integer", "minimum": 0}}
_ERROR = {"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]}
_QUOTA_ERROR = {
    "type": "object",
    "properties": {
        "detail": {"type": "string"},
        "limit": {"type": "string", "description": "the setting that is reached"},
        "max": {"type": "number", "description": "its value"},
    },
    "required": ["detail", "limit", "max"],
}
_SCHEMA = {422: "HTTPValidationError", 429: "QuotaError"}
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _response(code: int, when: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{_SCHEMA.get(code, 'Error')}"}
    out: dict[str, Any] = {"description": when, "content": {"application/json": {"schema": ref}}}
    if code in (429, 503):
        out["headers"] = {"Retry-After": {**_RETRY_AFTER, "required": code == 503}}
    if code == 429:
        out["headers"].update(
            {h: {"description": what, "schema": {"type": "integer"}} for h, what in _RATE.items()}
        )
    return out


_RATE = {
    "RateLimit-Limit": "tokens the key's bucket holds (its burst)",
    "RateLimit-Remaining": "tokens left",
    "RateLimit-Reset": "seconds until enough tokens are back",
}


def _guarded(method: str, allowed: Access, errors: dict[int, str]) -> dict[int, str]:
    """``errors`` with what the guard may answer before the operation runs."""
    out = {400: _GUARD[400], **errors}
    if method in WRITE_METHODS:
        out.setdefault(415, _UNSUPPORTED)
    if allowed.scope is None:
        return out
    out |= {c: _GUARD[c] for c in (401, 403)}
    out[429] = f"{errors[429]}; or {_GUARD[429]}" if 429 in errors else _GUARD[429]
    if allowed.model is not None:
        out[404] = f"{errors.get(404, _NO_MODEL)}, {_OTHER_TENANT}"
    return out


# -- learner specs and input configs ---------------------------------------------------

_SPEC = {"$ref": "#/components/schemas/LearnerSpec"}
_LABEL = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
_SIZE = {"type": "integer", "minimum": 1, "maximum": mp.MAX_SIZE}
_NAME = {"type": "string", "minLength": 1}
_NAMES = {"type": "array", "minItems": 1, "uniqueItems": True, "items": _NAME}


def _bounds(low: Any, high: Any, low_open: bool = False, high_open: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if low is not None:
        out["exclusiveMinimum" if low_open else "minimum"] = low
    if high is not None:
        out["exclusiveMaximum" if high_open else "maximum"] = high
    return out


def constraint_schema(c: mp.Constraint) -> dict[str, Any]:
    """The JSON Schema of the values a parameter constraint accepts (any, if unknown)."""
    s: dict[str, Any]
    if isinstance(c, mp.Real):
        s = {"type": "number", **_bounds(c.low, c.high, c.low_open, c.high_open)}
    elif isinstance(c, mp.Integer):
        s = {"type": "integer", **_bounds(c.low, c.high)}
    elif isinstance(c, mp.Bool):
        s = {"type": "boolean"}
    elif isinstance(c, mp.Options):
        s = {"enum": list(c.choices)}
    elif isinstance(c, mp.Labels):
        n = c.exactly
        s = {"type": "array", "items": _LABEL, "uniqueItems": True, "minItems": n or c.minimum}
        s.update({} if n is None else {"maxItems": n})
    elif isinstance(c, mp.RealArray):
        s = {"type": "array", "items": {"type": "number", **_bounds(c.low, None)}}
    elif isinstance(c, Spec):
        s = _SPEC
    elif isinstance(c, SpecList):
        s = {"type": "array", "items": _SPEC, "minItems": 1, "maxItems": c.maximum}
    else:
        return {}
    return {"anyOf": [s, {"type": "null"}]} if c.optional else s


def learner_schemas() -> dict[str, dict[str, Any]]:
    """``LearnerSpec``, one of a schema per kind (``Learner_<kind>``), from the registry."""
    out: dict[str, dict[str, Any]] = {}
    for k in describe():
        kind, constraints = k["kind"], KINDS[k["kind"]]._parameter_constraints
        props: dict[str, Any] = {"kind": {"const": kind}}
        for p in k["parameters"]:
            props[p["name"]] = {
                **constraint_schema(constraints[p["name"]]),
                "description": p["expected"],
            }
            if not p["required"] and p["default"] is not None:
                props[p["name"]]["default"] = p["default"]
        out[f"Learner_{kind}"] = {
            "type": "object",
            "title": kind,
            "description": f"{k['summary']} Takes {k['input']}.",
            "properties": props,
            "required": ["kind", *(p["name"] for p in k["parameters"] if p["required"])],
            "additionalProperties": False,
        }
    refs = {kind: f"#/components/schemas/Learner_{kind}" for kind in KINDS}
    out["LearnerSpec"] = {
        "oneOf": [{"$ref": r} for r in refs.values()],
        "discriminator": {"propertyName": "kind", "mapping": refs},
    }
    return out


def _section(props: dict[str, Any], required: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": [required],
        "additionalProperties": False,
    }


def input_schemas() -> dict[str, dict[str, Any]]:
    """The sections of an input config as :class:`models.inputs.space.InputSpace` reads them."""
    constant = {"constant_attribute": {"type": "boolean", "default": False}}
    seed = {"type": "integer", "minimum": 0, "maximum": STORED_INTS[1], "default": 0}
    hashing = _section({"n_features": _SIZE, "seed": seed}, "n_features")
    split = {"type": "array", "items": _LABEL, "uniqueItems": True}
    by = {"enum": list(BY)}
    combinations = _section(
        {
            "size": {"type": "integer", "minimum": 2, "maximum": 1_000_000},
            "by": {
                "anyOf": [by, {"type": "array", "items": by, "minItems": 1, "uniqueItems": True}],
                "default": "score",
            },
        },
        "size",
    )
    experts = {
        "expert_names": _NAMES,
        "normalize": {
            "anyOf": [
                {"enum": list(NORMALIZE)},
                {
                    "type": "array",
                    "items": {"enum": list(NORMALIZE)},
                    "minItems": 1,
                    "uniqueItems": True,
                },
            ],
            "default": "raw",
        },
        "combinations": {
            "anyOf": [{"type": "null"}, combinations],
            "default": None,
            "description": "averages of every subset of 2 to size experts, each a sub-expert",
        },
        "threshold_experts": {"type": "boolean", "default": False},
        "split_classes": {"anyOf": [{"const": "all"}, {"type": "null"}, split], "default": None},
        "retired": {**_NAMES, "description": "experts that vote no more (see POST .../experts)"},
    }
    return {
        "AttributesConfig": {
            "oneOf": [
                _section({"n_features": _SIZE, **constant}, "n_features"),
                _section({"feature_names": _NAMES, **constant}, "feature_names"),
                _section({"hashing": hashing, **constant}, "hashing"),
            ],
        },
        "ExpertsConfig": _section(experts, "expert_names"),
    }


def _walk(node: Any) -> Any:
    """Every dict in ``node``, depth first."""
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def complete(doc: dict[str, Any], settings: Settings, routes: dict[str, Access]) -> None:
    """Complete FastAPI's document ``doc`` in place (see the module docstring)."""
    schemas = doc["components"]["schemas"]
    schemas.update(Error=_ERROR, QuotaError=_QUOTA_ERROR, **learner_schemas(), **input_schemas())
    doc["components"]["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer", "description": "an API key"}
    }
    schemas["HTTPValidationError"]["required"] = ["detail"]
    model = schemas["ModelCreate"]["properties"]
    model["learner"] = {"$ref": "#/components/schemas/LearnerSpec", **model["learner"]}
    model["learner"].pop("type", None)
    model["labels"].update(maxItems=settings.max_labels, uniqueItems=True)
    config = schemas["InputConfig"]
    for f in ("attributes", "experts"):
        ref = {"$ref": f"#/components/schemas/{f.capitalize()}Config"}
        config["properties"][f]["anyOf"] = [ref, {"type": "null"}]
    # one of them at least, not null
    config["anyOf"] = [
        {"required": [f], "properties": {f: {"type": "object"}}} for f in ("attributes", "experts")
    ]
    for batch in ("PredictBatchCreate", "LabelBatchCreate", "LearnBatchCreate"):
        schemas[batch]["properties"]["items"]["maxItems"] = settings.max_batch_items
    # the items of a prediction batch agree on track, unless the batch says it
    agree = [
        {"properties": {"track": {"const": v}}, "required": ["track"] * (not v)}
        for v in (True, False)
    ]
    schemas["PredictBatchCreate"]["anyOf"] = [
        {"properties": {"track": {"type": "boolean"}}, "required": ["track"]},
        *({"properties": {"items": {"items": a}}} for a in agree),
    ]
    for node in _walk(schemas):
        if node.get("type") == "string" and node.get("maxLength") == MAX_LABEL_LENGTH:
            node["maxLength"] = settings.max_label_length
    seen = set()
    for path, item in doc["paths"].items():
        for method, op in item.items():
            key = f"{method.upper()} {path}"
            if key not in ERRORS:
                raise LookupError(f"{key}: no entry in app.http.openapi.ERRORS")
            seen.add(key)
            allowed = routes[key]
            if allowed.scope is not None:
                op["security"] = [{"bearer": []}, {}]  # {}: while auth is off
            errors = _guarded(method.upper(), allowed, {431: _HEADERS, 503: _BUSY, **ERRORS[key]})
            op["responses"].update({str(c): _response(c, w) for c, w in sorted(errors.items())})
            for p in op.get("parameters", []):
                if p["in"] == "path" and p["name"] == "name":
                    p["schema"]["examples"] = [EXAMPLE_MODEL["name"]]
    _exact_integer_bounds(doc)
    if set(ERRORS) - seen:
        raise LookupError(
            f"app.http.openapi.ERRORS names no operation: {sorted(set(ERRORS) - seen)}"
        )


def _exact_integer_bounds(doc: dict[str, Any]) -> None:
    """The bounds of integers as integers: FastAPI's document model keeps every bound as a
    float (2**63 would be written ``9.223372036854776e+18``). The API's integer bounds are
    exact as floats (powers of two, 10**9), so each is the integer it was declared as."""
    for node in _walk(doc):
        if node.get("type") != "integer":
            continue
        for bound in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            v = node.get(bound)
            if isinstance(v, float) and v.is_integer():
                node[bound] = int(v)


async def _http_error(request: Request, exc: Exception) -> Response:
    """FastAPI's answer to ``exc``; a 405 names every method its path has in ``Allow``,
    and a body FastAPI could not even decode (not UTF-8) is a 422 like any other bad body."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
        error = {"loc": ["body"], "msg": "the body is not UTF-8 JSON", "type": "json_invalid"}
        return JSONResponse({"detail": [error]}, status_code=422)
    if exc.status_code == 405:
        routes, scope = request.app.router.routes, request.scope
        allowed = [
            m
            for m in _METHODS
            if any(r.matches({**scope, "method": m})[0] is Match.FULL for r in routes)
        ]
        exc.headers = {**(exc.headers or {}), "Allow": ", ".join(allowed)}
    return await http_exception_handler(request, exc)


def _declared(app: FastAPI) -> dict[str, Access]:
    """Each operation's declared access, by ``"METHOD path"``."""
    out = {}
    for route in flat_routes(app.routes):
        allowed = declared(route)
        for method in getattr(route, "methods", None) or ():
            if allowed is not None:
                out[f"{method} {getattr(route, 'path', '')}"] = allowed
    return out


def install(app: FastAPI, settings: Settings) -> None:
    """Serve the completed document, and name every allowed method in a 405's ``Allow``."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = generate()
            complete(doc, settings, _declared(app))
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_exception_handler(HTTPException, _http_error)
