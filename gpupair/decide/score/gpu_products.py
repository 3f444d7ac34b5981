"""Which GPU product a node has and which products a pod accepts, as the fragmentation score
counts them (a shape fits only on a product it accepts, so scarce products are kept for the pods
pinned to them).

Names are compared in the form of GPU feature discovery's ``nvidia.com/gpu.product`` label: the
name NVML gives with each space made a dash (``NVIDIA A100-SXM4-80GB`` is
``NVIDIA-A100-SXM4-80GB``, k8s-device-plugin internal/lm/resource.go ``productLabel``). GFD adds
``-SHARED`` when time-slicing replicates the GPU; that suffix is dropped, so a pod pinned to the
shared label counts as accepting the product's unshared nodes too (a small overstatement; the
score never filters).

A node's product: its reporter's (NVML discovery, or the DRA driver's ``productName``), else its
GFD label. A pod's: its ``nodeSelector`` and required node affinity on the label (terms ORed,
expressions ANDed; ``In`` and ``NotIn``, any other operator says nothing of the product), and for
DRA claims a CEL selector on ``productName`` in its simple forms (``==``, ``in [...]``); any
other selector on ``productName`` reads as any product, with a note saying so.

Pure: no I/O. A spec that is not the shape Kubernetes' API gives raises ``PodRequestError``
with the field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupair.decide.pod.pod_request import PodRequestError

PRODUCT_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery's
SHARED_SUFFIX = "-SHARED"  # GFD's, on time-sliced GPUs
NO_PRODUCT = "(none)"  # accepted where a pod accepts no known product: no label value has parentheses
RULE = "(rule)"  # first of a key that needs the nodes' products to resolve (a NotIn without an In)


def normalise(name: Any) -> str:
    """A product name in the label's form; "" for none."""
    if not isinstance(name, str):
        return ""
    text = "-".join(name.split())
    return text[: -len(SHARED_SUFFIX)] if text.endswith(SHARED_SUFFIX) else text


def label_product(node: Any) -> str:
    """A Node object's GFD product label, normalised; "" without one."""
    meta = node.get("metadata") if isinstance(node, Mapping) else None
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return normalise(labels.get(PRODUCT_LABEL)) if isinstance(labels, Mapping) else ""


def node_product(reported: str, label: str) -> str:
    """The node's product: what its reporter (or DRA driver) says, else its GFD label; "" when
    neither."""
    return normalise(reported) if reported else normalise(label)


@dataclass(frozen=True)
class Term:
    """One node selector term's say on the product: the products it names ``In`` (None: any)
    less those it names ``NotIn``."""

    within: frozenset[str] | None = None
    without: frozenset[str] = frozenset()

    def both(self, other: Term) -> Term:
        within = self.within if other.within is None else (
            other.within if self.within is None else self.within & other.within)
        return Term(within, self.without | other.without)

    def among(self, products: Iterable[str]) -> frozenset[str]:
        named = self.within if self.within is not None else frozenset(products)
        return named - self.without


ANY_TERM = Term()


@dataclass(frozen=True)
class Accepted:
    """The products a pod accepts: any of ``terms`` (no terms: every product)."""

    terms: tuple[Term, ...] = ()

    @property
    def any(self) -> bool:
        return not self.terms or ANY_TERM in self.terms

    def both(self, other: Accepted) -> Accepted:
        """Accepted by both (a nodeSelector and an affinity, a pod and its claims)."""
        if self.any:
            return other
        if other.any:
            return self
        return Accepted(tuple(dict.fromkeys(a.both(b) for a in self.terms for b in other.terms)))

    def among(self, products: Sequence[str]) -> tuple[str, ...]:
        """As a shape's models (gpupair/decide/score/fragmentation.py): () for any product, else the
        products accepted, ``products`` (the nodes' ones) giving the universe a ``NotIn`` takes
        from; ``(NO_PRODUCT,)`` when none."""
        if self.any:
            return ()
        found: set[str] = set()
        for term in self.terms:
            found |= term.among(products)
        return tuple(sorted(found)) or (NO_PRODUCT,)

    def key(self) -> tuple[str, ...]:
        """A shape's models where they need no universe (``among``), else a key that names the
        rule: ``RULE`` then each term (label values have no ``=``, ``,`` or ``;``)."""
        if all(term.within is not None for term in self.terms):
            return self.among(())
        return (RULE, *sorted(f"in={','.join(sorted(t.within)) if t.within is not None else '*'};"
                              f"out={','.join(sorted(t.without))}" for t in self.terms))


ANY = Accepted()


def only(products: Iterable[str]) -> Accepted:
    return Accepted((Term(frozenset(normalise(p) for p in products)),))


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodRequestError(f"{where}: must be an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodRequestError(f"{where}: must be a list")
    return value


def _term(term: Any, where: str) -> Term:
    found = ANY_TERM
    for i, expression in enumerate(_list(_mapping(term, where).get("matchExpressions"), f"{where}.matchExpressions")):
        at = f"{where}.matchExpressions[{i}]"
        expression = _mapping(expression, at)
        if expression.get("key") != PRODUCT_LABEL:
            continue
        values = _list(expression.get("values"), f"{at}.values")
        if not all(isinstance(v, str) for v in values):
            raise PodRequestError(f"{at}.values: must be strings")
        named = frozenset(normalise(v) for v in values)
        operator = expression.get("operator")
        if operator == "In":
            found = found.both(Term(named))
        elif operator == "NotIn":
            found = found.both(Term(None, named))
        # Exists, DoesNotExist, Gt, Lt: nothing about which product
    return found


def pod_accepts(pod: Any) -> Accepted:
    """The products a pod accepts by its nodeSelector and required node affinity on
    ``nvidia.com/gpu.product``."""
    if not isinstance(pod, Mapping):
        raise PodRequestError("pod must be an object")
    spec = _mapping(pod.get("spec"), "spec")
    selector = _mapping(spec.get("nodeSelector"), "spec.nodeSelector")
    accepted = ANY
    if PRODUCT_LABEL in selector:
        value = selector[PRODUCT_LABEL]
        if not isinstance(value, str):
            raise PodRequestError(f"spec.nodeSelector[{PRODUCT_LABEL}]: must be a string")
        accepted = only([value])
    where = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    affinity = _mapping(_mapping(spec.get("affinity"), "spec.affinity").get("nodeAffinity"), "spec.affinity.nodeAffinity")
    required = _mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), where)
    terms = [_term(term, f"{where}.nodeSelectorTerms[{i}]")
             for i, term in enumerate(_list(required.get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms"))]
    return accepted.both(Accepted(tuple(dict.fromkeys(terms)))) if terms else accepted


# device.attributes["gpu.nvidia.com"].productName or device.attributes["gpu.nvidia.com"]["productName"]
_ATTRIBUTE = r'device\.attributes\[\s*"(?P<domain>[^"]+)"\s*\](?:\.productName|\[\s*"productName"\s*\])'
_STRING = r'"(?P<value>[^"\\]*)"'
_EQUALS = re.compile(rf"^\(?\s*(?:{_ATTRIBUTE}\s*==\s*{_STRING}|{_STRING.replace('value', 'first')}\s*==\s*"
                     rf"{_ATTRIBUTE.replace('domain', 'domain2')})\s*\)?$")
_IN = re.compile(rf"^\(?\s*{_ATTRIBUTE}\s+in\s+\[(?P<values>[^\]]*)\]\s*\)?$")
_ITEM = re.compile(r'^\s*"([^"\\]*)"\s*$')


def selector_accepts(expression: Any, driver: str) -> tuple[Accepted, str]:
    """The products a DRA claim's CEL selector accepts, and a note when it names ``productName``
    in a form not read here (then: any product)."""
    if not isinstance(expression, str) or "productName" not in expression:
        return ANY, ""
    text = expression.strip()
    equals = _EQUALS.match(text)
    if equals is not None:
        domain = equals.group("domain") or equals.group("domain2")
        value = equals.group("value") if equals.group("value") is not None else equals.group("first")
        if domain == driver:
            return only([value]), ""
    listed = _IN.match(text)
    if listed is not None and listed.group("domain") == driver:
        items = [_ITEM.match(item) for item in listed.group("values").split(",")] if listed.group("values").strip() else []
        if all(item is not None for item in items):
            return only([item.group(1) for item in items if item is not None]), ""
    return ANY, (f"CEL selector on productName not read (only `device.attributes[\"{driver}\"].productName "
                 f"== \"...\"` or `in [...]`): counted as any product: {text[:120]}")
