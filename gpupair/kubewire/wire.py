"""Kubernetes wire types more than one part decodes, and one way to say why a body does not fit.

``UserInfo`` (authentication.k8s.io/v1) reaches the webhook inside every AdmissionRequest and
the reporter inside every TokenReview answer; one model keeps both readings the same. Decoded
leniently about unknown fields (the apiserver adds fields over releases) and strictly about
types.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class KubeWire(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)


class UserInfo(KubeWire):
    username: str = ""
    uid: str = ""
    groups: list[str] = Field(default_factory=list)
    extra: dict[str, list[str]] = Field(default_factory=dict)


def explain(exc: ValidationError) -> str:
    """``Pod.spec.containers.0.name: Input should be a valid string (and 2 more)``: where the
    first problem is and what it is, in one line."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    message = first["msg"].removeprefix("Value error, ")
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {message}{more}"


Model = TypeVar("Model", bound=BaseModel)


def annotation_model(key: str, text: object, model: type[Model], limit: int, error: type[ValueError]) -> Model:
    """The JSON annotation ``key`` as ``model``, or ``error`` saying in one line why not: not a
    string, over ``limit`` characters, or not what the model allows."""
    if not isinstance(text, str):
        raise error(f"{key} must be a string")
    if len(text) > limit:
        raise error(f"{key} is {len(text)} bytes, over the {limit} limit")
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        raise error(f"{key} rejected at {explain(exc)}") from None
