"""Models: create, list, read, delete; their learner state; the learner kinds."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request, Response, status
from pydantic import Discriminator, Tag

from app.core.errors import Forbidden
from app.http.deps import IdempotencyKeyDep, NameDep, ServiceDep
from app.http.permissions import ADMIN, READ, access
from app.http.routers.common import idempotency
from app.http.schemas import (
    Counters,
    ExpertsChange,
    FeaturesChange,
    LabelsChange,
    LearnerKind,
    ModelCreate,
    ModelFork,
    ModelPublic,
    ModelsPublic,
    Rollback,
    StatePublic,
    StateUpdate,
)
from app.service.access import Auth, Principal, principal_of
from app.service.model_service import ModelService
from models.registry import describe
from storage.errors import Full, ModelNotFound
from storage.repository import Idempotency, StoredModel

router = APIRouter(prefix="/v1", tags=["models"])


def public(m: StoredModel) -> ModelPublic:
    c = m.current
    return ModelPublic(
        name=m.name,
        labels=c["labels"],
        input=c["input"],
        learner=c["learner"],
        label_ttl=c["label_ttl"],
        max_active=c.get("max_active"),
        created=m.created,
        version=m.version,
        folded=m.folded,
        counters=Counters(**m.counters),
    )


def _kind_of_create(body: Any) -> str:
    """The shape of a POST /v1/models body (app.http.error_status.BODY_TAGS)."""
    return "fork" if isinstance(body, dict) and "from" in body else "create"


CreateBody = Annotated[
    Annotated[ModelCreate, Tag("create")] | Annotated[ModelFork, Tag("fork")],
    Discriminator(_kind_of_create),
]


@router.post("/models", status_code=status.HTTP_201_CREATED)
@access(ADMIN, action="create model")
async def create_model(
    body: CreateBody, request: Request, service: ServiceDep, key: IdempotencyKeyDep = None
) -> ModelPublic:
    """Create a model; 409 if the name is taken, 422 naming a bad input or learner field,
    429 when the service holds the most models it may. With an ``Idempotency-Key``, a
    retry gets the first answer.

    With ``"from": {"model", "version"}`` the model is a fork: it starts with the
    source's input and its learner's state at that version (404 for an unknown source, 422
    for a version it cannot be rebuilt at, see ``GET /v1/models/{name}/versions``); with
    another ``learner``, that learner is trained by replaying the source's log up to
    there. The fork's log starts with that state, as an import."""
    idem = idempotency(key, "create", body.name, await request.body())
    request.scope["committee.model"] = body.name
    auth: Auth = request.app.state.auth
    return await make_model(service, auth, principal_of(request.scope), body, idem)


async def make_model(
    service: ModelService,
    auth: Auth,
    principal: Principal,
    body: ModelCreate | ModelFork,
    idem: Idempotency | None,
) -> ModelPublic:
    """Create or fork a model for ``principal``: within its key's models and its quota of
    models (:class:`Forbidden` and :class:`Full` otherwise); a fork's source must be
    within its models too (as if missing otherwise)."""
    if isinstance(body, ModelFork) and not principal.sees(body.from_.model):
        raise ModelNotFound(body.from_.model)  # the same answer as a missing model

    async def make() -> ModelPublic:
        if isinstance(body, ModelFork):
            overrides = body.model_dump(include={"learner", "label_ttl", "max_active"})
            f = body.from_
            return public(await service.fork(body.name, f.model, f.version, overrides, idem))
        config = body.model_dump(exclude={"name"}, exclude_none=False)
        config["input"] = {k: v for k, v in config["input"].items() if v is not None}
        return public(await service.create_model(body.name, config, idem))

    if principal.key is None:
        return await make()
    if not principal.sees(body.name):
        raise Forbidden(
            f"this key makes models matching {principal.key.models!r} only, not {body.name!r}"
        )
    # the model counts against the key's quota from before it exists until it is deleted
    most = auth.limiter.limits(principal.key).max_models
    reserved = await auth.store.reserve(body.name, principal.key.id, most)
    if reserved == "full":
        raise Full("max_models", most, f"this key has made {most} models, its most (max_models)")
    try:
        return await make()
    except BaseException:
        if reserved == "new":
            await auth.store.release(body.name)
        raise


@router.get("/models")
@access(READ)
async def list_models(request: Request, service: ServiceDep) -> ModelsPublic:
    """The models this key reaches (every model while auth is off)."""
    principal = principal_of(request.scope)
    found = await service.list_models(principal.sees)
    return ModelsPublic(models=[public(m) for m in found])


@router.get("/models/{name}")
@access(READ, model="name")
async def get_model(name: NameDep, service: ServiceDep) -> ModelPublic:
    """The model's config and counters."""
    return public(await service.store.read(name))


@router.delete("/models/{name}", status_code=status.HTTP_204_NO_CONTENT)
@access(ADMIN, model="name", action="delete model")
async def delete_model(
    name: NameDep, request: Request, service: ServiceDep, key: IdempotencyKeyDep = None
) -> Response:
    """Delete a model and everything it holds, at once. With an ``Idempotency-Key``, a
    retry of a delete that was done answers 204 again."""
    await service.delete_model(name, idempotency(key, "delete", name, b""))
    await request.app.state.auth.store.release(name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/models/{name}/state")
@access(ADMIN, model="name", action="export state")
async def get_state(name: NameDep, service: ServiceDep) -> StatePublic:
    """The full learner state (for backup or migration) and the log version it is at."""
    version, state = await service.export_state(name)
    return StatePublic(model_version=version, state=state)


@router.put("/models/{name}/state")
@access(ADMIN, model="name", action="import state")
async def put_state(
    name: NameDep,
    body: StateUpdate,
    request: Request,
    service: ServiceDep,
    key: IdempotencyKeyDep = None,
) -> StatePublic:
    """Replace the learner state with one exported from a model of the same spec."""
    idem = idempotency(key, "import", name, await request.body())
    version = await service.import_state(name, body.state, idem)
    return StatePublic(model_version=version, state=body.state)


async def _change(
    name: str,
    part: str,
    body: ExpertsChange | FeaturesChange | LabelsChange,
    request: Request,
    service: Any,
    key: str | None,
) -> ModelPublic:
    idem = idempotency(key, part, name, await request.body())
    await service.change_input(name, {part: body.model_dump(exclude_none=True)}, idem)
    return public(await service.store.read(name))


@router.post("/models/{name}/experts")
@access(ADMIN, model="name", action="change experts")
async def change_experts(
    name: NameDep,
    body: ExpertsChange,
    request: Request,
    service: ServiceDep,
    key: IdempotencyKeyDep = None,
) -> ModelPublic:
    """Add experts and retire experts, live: one entry in the model's log, which every
    worker applies at the same point. A new expert enters as if it had been there from
    the start and had never voted (see the learners' pages for each kind's weight); a
    retired one keeps its weight and its name, and a payload in which it votes is a 422.
    422 naming the field when a name is taken (a retired one included) or the learner
    cannot take new inputs. With an ``Idempotency-Key``, a retry gets the first answer."""
    return await _change(name, "experts", body, request, service, key)


@router.post("/models/{name}/features")
@access(ADMIN, model="name", action="add features")
async def add_features(
    name: NameDep,
    body: FeaturesChange,
    request: Request,
    service: ServiceDep,
    key: IdempotencyKeyDep = None,
) -> ModelPublic:
    """Add named features, live (a model with ``feature_names`` only), as a change of
    experts is."""
    return await _change(name, "features", body, request, service, key)


@router.post("/models/{name}/labels")
@access(ADMIN, model="name", action="add labels")
async def add_labels(
    name: NameDep,
    body: LabelsChange,
    request: Request,
    service: ServiceDep,
    key: IdempotencyKeyDep = None,
) -> ModelPublic:
    """Add labels, live: every multi-class learner gains a class (with its threshold
    and attribute sub-experts where the input has them); a binary learner refuses with a
    422. Predictions served before the change still take their labels."""
    return await _change(name, "labels", body, request, service, key)


@router.post("/models/{name}/rollback")
@access(ADMIN, model="name", action="roll back")
async def rollback(
    name: NameDep,
    body: Rollback,
    request: Request,
    service: ServiceDep,
    key: IdempotencyKeyDep = None,
) -> ModelPublic:
    """Reset the model's learner to its state at ``version``: an entry in its log, so the
    rollback is logged, and reversible (the versions before it stay restorable while the
    log holds them). Experts, features and labels added since stay, entering as they did,
    and predictions made since still take their labels. 422 naming ``version`` for one
    it cannot be rebuilt at (see ``GET .../versions``). With an ``Idempotency-Key``, a
    retry gets the first answer."""
    idem = idempotency(key, "rollback", name, await request.body())
    await service.rollback(name, body.version, idem)
    return public(await service.store.read(name))


@router.get("/models/{name}/versions")
@access(READ, model="name")
async def versions(name: NameDep, service: ServiceDep) -> dict[str, Any]:
    """The versions the model can be rebuilt at (a fork's ``from.version``): from its
    snapshot, or from its creation while its log holds every entry, to its current one;
    and its latest changes of input and imports of state, with their versions."""
    return await service.versions(name)


@router.get("/learners", tags=["learners"])
@access(READ)
async def learners() -> list[LearnerKind]:
    """Every learner kind with its parameters, defaults and allowed values."""
    kinds: list[dict[str, Any]] = describe()
    return [LearnerKind(**k) for k in kinds]
