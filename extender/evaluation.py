"""What the extender knows per node, for every verb: the core's decision for each node offered.

Every verb asks the same question of the same Decider the simulator uses; this module only
supplies what the extender knows per node: its report entry (from the request's Node objects
or the node cache), what the node owes to pods bound there, its Lease, and the time for
staleness. The verbs' own logic lives in filter.py, prioritize.py, bind.py and preempt.py; in
NodeNames mode filter and prioritize answer from DecisionTables (the same decisions, kept per
GPU count and intent) and decide afresh only nodes that hold reservations. A pod that a defrag
plan holds devices for (extender/cache/defrag_holds.py) is decided on its own on the nodes where
they are: the tables count every hold, its own included.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cachetools import LRUCache, TTLCache

from gpupair.extender.cache.decision_tables import DecisionTables
from gpupair.decide.judge.decisions import Decider, NodeDecision
from gpupair.decide.picture.dra_picture import claim_names
from gpupair.decide.picture.node_entries import ReportEntry
from gpupair.decide.picture.node_picture import NodePicture
from gpupair.extender.protocol import ExtenderArgs
from gpupair.decide.judge.reservations import NO_HOLD, Hold, Reservations
from gpupair.decide.claims.claim_intent import dra_pod_intent, strictest
from gpupair.decide.pod.intent import Intent
from gpupair.decide.pod.nic_ask import DEFAULT_LEVEL, DEFAULT_RDMA_RESOURCES, NicAsk, nic_ask
from gpupair.decide.pod.pod_request import PodRequestError
from gpupair.decide.devices.policies import POLICIES
from gpupair.decide.pod.scope import Scope, pod_scope

NVLINK_POLICIES = ("dra-nvlink-pairs", "dra-nvlink-pairs-or-first-fit")

log = logging.getLogger("gpupair.extender")

UNCACHED_PROBLEM = "node not in the extender's node cache (not listed yet, or deleted)"
UNSYNCED_PROBLEM = "the extender's node cache has not finished its first list"
# How long bind's refusal of an allocation that broke the pod's intent keeps the pod off that
# node: the allocator, asked again, would most likely take the same devices.
DENIED_TTL = 600.0
NO_CACHE_PROBLEM = ("the extender runs without a node cache (--no-node-cache): register it with "
                    "nodeCacheCapable: false, or drop that flag")


@dataclass
class Offer:
    """The nodes of one request: names in the order offered, and how to find each report."""

    names: list[str]
    entry_of: Callable[[str], ReportEntry | None]
    unknown: ReportEntry  # stands in for a name the lookup does not know
    nodes: list[dict[str, Any]] | None = None  # Nodes mode: the Node objects, to hand back
    cached: bool = False  # NodeNames mode with a synced node cache: tables apply
    decider: Decider | None = None  # a claim pod's: the allocator's policy for its claims
    owned: dict[str, frozenset[int]] = field(default_factory=dict)  # node -> devices the pod's own claims hold
    denied: dict[str, str] = field(default_factory=dict)  # node -> why bind refused the pod's allocation there
    held: dict[str, Hold] = field(default_factory=dict)  # node -> what it owes others, where a hold is the pod's


@dataclass
class Evaluator:
    decider: Decider
    reservations: Reservations
    nodes: NodePicture  # every node's entry, its Lease, and the pod's own claims
    node_cache: Any = None  # NodeCache; None when the extender runs without one
    tables: DecisionTables | None = None  # over node_cache
    clock: Callable[[], float] = time.time
    seen_limit: int = 16384
    default_intent: Intent = Intent.REQUIRED  # for pods without gpupair.io/placement
    rdma_resources: tuple[str, ...] = DEFAULT_RDMA_RESOURCES  # requesting one asks for a NIC
    nic_level: str = DEFAULT_LEVEL  # for pods without gpupair.io/nic-level
    defrag: Any = None  # DefragHolds: the holds defrag plans keep for pods; None without the plans' watch

    def __post_init__(self) -> None:
        # Entries memoise decisions of one Decider, so each Evaluator has its own stand-ins.
        self.uncached = ReportEntry(None, UNCACHED_PROBLEM, "missing")
        self.unsynced = ReportEntry(None, UNSYNCED_PROBLEM, "missing")
        self.no_cache = ReportEntry(None, NO_CACHE_PROBLEM, "missing")
        # Nodes mode: the last report each node showed, so bind can plan without a node cache.
        self.last_seen: LRUCache = LRUCache(self.seen_limit)
        self._pod_deciders: TTLCache = TTLCache(maxsize=100_000, ttl=600.0)  # pod uid -> its Decider, for bind
        self._variants: dict[tuple, Decider] = {}
        self._denied: TTLCache = TTLCache(maxsize=100_000, ttl=DENIED_TTL)  # pod uid -> {node: why}
        self._last_decider: tuple[tuple[str, str] | None, Decider] = (None, self.decider)  # by pod_key

    # ---- one request

    def offer(self, args: ExtenderArgs) -> Offer:
        """The request's nodes; for a pod with DRA claims, or one that asks for the network,
        decided by its own Decider (the tables hold the default one's decisions, so they do not
        apply)."""
        offer = self._offer(args)
        variant = self.decider_for(args.Pod)
        if variant is not self.decider:
            offer.decider, offer.cached = variant, False
        offer.owned = self.owned(args.Pod)
        uid = _uid(args.Pod)
        offer.denied = self._denied.get(uid, {}) if uid else {}
        if self.defrag is not None and self.defrag.active:
            keys = self.defrag.keys_for(args.Pod)
            if keys:
                offer.held = {node: self.reservations.hold(node, exclude=keys) for node in self.defrag.nodes_of(keys)}
        return offer

    def alive(self, node: str) -> float | None:
        """The node's last sign of life beyond its report (its Lease's renewal), if any."""
        return self.nodes.alive(node)

    def owned(self, pod: Any) -> dict[str, frozenset[int]]:
        """Devices the pod's own DRA claims hold, by node (gpupair/decide/picture/dra_source.py)."""
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        return self.nodes.owned(_uid(pod), str(meta.get("namespace") or ""), claim_names(pod))

    def owned_on(self, uid: str, node: str) -> frozenset[int]:
        """Devices on ``node`` of the claims reserved for or owned by pod ``uid`` (bind knows the
        pod by name and UID only; the scheduler reserves its claims before it calls bind)."""
        if not uid:
            return frozenset()
        return self.nodes.owned(uid).get(node, frozenset())

    def deny(self, uid: str, node: str, why: str) -> None:
        """Keep pod ``uid`` off ``node`` for DENIED_TTL: bind refused the allocation made there."""
        if uid:
            denied = dict(self._denied.get(uid, {}))
            denied[node] = why
            self._denied[uid] = denied

    def pod_key(self, pod: Any) -> tuple[str, str] | None:
        """(UID, resourceVersion) of a request's pod, under which what is read of it holds: one
        version is one object on the API server, and kube-scheduler sends the same one to filter
        and prioritize. None without both, or for a pod with DRA claims (what they ask is read
        from the claim watch, which may still be catching up)."""
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        if not isinstance(meta, dict):
            return None
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not (isinstance(uid, str) and uid and isinstance(version, str) and version):
            return None
        if claim_names(pod):
            return None
        return uid, version

    def decider_for(self, pod: Any) -> Decider:
        """The Decider for this pod: its claims' allocator policy, its NIC ask; remembered by UID
        for bind's plan."""
        key = self.pod_key(pod)
        if key is not None and self._last_decider[0] == key:
            return self._last_decider[1]  # prioritize after filter, the pod unchanged
        variant = self._decider_for(pod)
        if key is not None:
            self._last_decider = (key, variant)
        return variant

    def _decider_for(self, pod: Any) -> Decider:
        policy, ask, scope = self._claim_policy(pod), self._nic_ask(pod), self._scope(pod)
        if scope is Scope.NUMA and policy in NVLINK_POLICIES:
            scope = Scope.NVLINK  # the claims carry the webhook's nvlink rewrite; the pod need not say it again
        if policy is None and ask is None and scope is Scope.NUMA:
            return self.decider
        key = (policy or self.decider.dra_policy.name, ask, scope)
        variant = self._variants.get(key)
        if variant is None:
            variant = self._variants[key] = replace(self.decider, dra_policy=POLICIES[key[0]], nic=ask, scope=scope)
        uid = (pod.get("metadata") or {}).get("uid")
        if isinstance(uid, str) and uid:
            self._pod_deciders[uid] = variant
        return variant

    def _claim_policy(self, pod: Any) -> str | None:
        try:
            demand = self.nodes.pod_demand(pod)
        except PodRequestError:
            return None  # the verb's request check has said so already
        return demand.policy if demand is not None else None

    def _nic_ask(self, pod: Any) -> NicAsk | None:
        ask, problem = nic_ask(pod, self.rdma_resources, self.nic_level)
        if problem:
            _warn_bad(pod, "bad NIC ask", problem)
        return ask

    def _scope(self, pod: Any) -> Scope:
        scope, problem = pod_scope(pod)
        if problem:
            _warn_bad(pod, "bad scope", problem)
        return scope

    def _offer(self, args: ExtenderArgs) -> Offer:
        if args.NodeNames is not None:
            cache = self.node_cache
            if cache is None:
                return Offer(args.NodeNames, lambda name: None, self.no_cache)
            if not cache.ready:
                return Offer(args.NodeNames, lambda name: None, self.unsynced)
            return Offer(args.NodeNames, cache.get, self.uncached, cached=self.tables is not None)
        nodes = (args.Nodes.items if args.Nodes is not None else None) or []
        entry_of = self.nodes.entry_of
        entries = {node["metadata"]["name"]: entry_of(node["metadata"]["name"], _notes(node)) for node in nodes}
        self.last_seen.update(entries)
        self._release_taken(entries)
        names = [node["metadata"]["name"] for node in nodes]
        return Offer(names, entries.get, self.uncached, nodes=nodes)

    def decisions(self, gpus: int, offer: Offer, names: list[str] | None = None,
                  intent: Intent = Intent.REQUIRED) -> list[NodeDecision]:
        """One decision per name (default: every offered name), in order."""
        now = self.clock()
        holds = self.reservations.by_node()
        decider, entry_of, unknown, alive = offer.decider or self.decider, offer.entry_of, offer.unknown, self.alive
        names = offer.names if names is None else names
        if offer.owned or offer.denied or offer.held:
            return [self._decide_for_pod(offer, decider, name, gpus, self.hold_on(offer, name, holds), now, intent)
                    for name in names]
        return [(entry_of(name) or unknown).decide(decider, name, gpus, holds.get(name, NO_HOLD), now,
                                                   alive(name), intent)
                for name in names]

    @staticmethod
    def hold_on(offer: Offer, name: str, holds: Mapping[str, Hold]) -> Hold:
        """What ``name`` owes for this offer's pod: every hold but those kept for the pod."""
        held = offer.held.get(name)
        return held if held is not None else holds.get(name, NO_HOLD)

    def _decide_for_pod(self, offer: Offer, decider: Decider, name: str, gpus: int, hold: Any, now: float,
                        intent: Intent) -> NodeDecision:
        """One node for a pod whose claims hold devices somewhere, that bind refused somewhere, or
        that a defrag plan holds devices for: a decision of its own, never kept for other pods."""
        why = offer.denied.get(name)
        if why:
            return NodeDecision(name, False, reason=why)
        entry, own = offer.entry_of(name) or offer.unknown, offer.owned.get(name)
        if own:
            return entry.decide_owning(decider, name, gpus, own, hold, now, self.alive(name), intent)
        return entry.decide(decider, name, gpus, hold, now, self.alive(name), intent)

    def intent_of(self, pod: Any) -> Intent:
        """The pod's placement intent: its own DRA claims' (a claim pod carries no annotation),
        else its annotation, else the default; a bad value counts as required, and is logged, as
        are claims that disagree."""
        claims = self.nodes.pod_claim_intents(pod)
        intent, problem = dra_pod_intent(pod, claims, self.default_intent)
        if problem:
            meta = pod.get("metadata") if isinstance(pod, dict) else None
            meta = meta if isinstance(meta, dict) else {}
            log.warning("bad placement intent", extra={
                "pod": f"{meta.get('namespace', '')}/{meta.get('name', '')}", "error": problem})
        return intent

    # ---- outside a request (bind, pod watch)

    def claimed_intent(self, uid: str) -> Intent | None:
        """The intent the allocated claims of pod ``uid`` ask (the strictest), None where they
        say nothing or there is no DRA: bind's intent for a pod it has not seen filtered."""
        if not uid:
            return None
        chosen, _ = strictest(self.nodes.held_claim_intents(uid))
        return chosen.intent if chosen is not None else None

    def entry_for(self, node: str) -> ReportEntry:
        """The freshest report known for ``node``."""
        cached = self.node_cache.get(node) if self.node_cache is not None else None
        seen = self.last_seen.get(node)
        known = [e for e in (cached, seen) if e is not None]
        if not known:
            return self.uncached
        return max(known, key=_freshness)

    def decide_one(self, gpus: int, node: str, exclude_uid: str | None = None,
                   intent: Intent = Intent.REQUIRED, own: frozenset[int] = frozenset()) -> NodeDecision:
        """The decision for one node now, counting the holds of other pods only (a defrag plan's
        for this pod are its own); ``own``: the devices the pod's own DRA claims already hold there."""
        exclude = exclude_uid
        if exclude_uid and self.defrag is not None and self.defrag.active:
            exclude = self.defrag.keys_of(exclude_uid) or exclude_uid
        hold = self.reservations.hold(node, exclude=exclude)
        decider = self.decider
        if exclude_uid and self._variants:  # else no pod has a Decider of its own: skip the TTLCache
            decider = self._pod_deciders.get(exclude_uid, decider)
        entry = self.entry_for(node)
        if own:
            return entry.decide_owning(decider, node, gpus, own, hold, self.clock(), self.alive(node), intent)
        return entry.decide(decider, node, gpus, hold, self.clock(), self.alive(node), intent)

    # ---- internals

    def own_cases(self, offer: Offer) -> set[str]:
        """Offered names whose table entry does not apply to this pod: its own claims hold
        devices there, bind refused it there, or a defrag plan holds devices there for it (the
        tables count every hold already)."""
        if not (offer.owned or offer.denied or offer.held):
            return set()
        return {*offer.owned, *offer.denied, *offer.held}.intersection(offer.names)

    def _release_taken(self, entries: Mapping[str, ReportEntry]) -> None:
        """Nodes mode has no node watch: a request's reports also end the holds they list."""
        for node in self.reservations.by_node():
            entry = entries.get(node)
            if entry is not None and entry.report is not None:
                self.reservations.observe_report(node, entry.report.state.free, entry.report.ledger)


def _notes(node: dict[str, Any]) -> dict[str, Any]:
    """A request's Node's annotations; a Node without any has none (not: no Node)."""
    annotations = node["metadata"].get("annotations")
    return annotations if isinstance(annotations, dict) else {}


def _uid(pod: Any) -> str:
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) else ""


def _freshness(entry: ReportEntry) -> tuple[int, float]:
    if entry.report is None:
        return (0, 0.0)
    return (1, entry.report.reported_at.timestamp())


def _warn_bad(pod: Any, what: str, problem: str) -> None:
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    log.warning(what, extra={"pod": f"{meta.get('namespace', '')}/{meta.get('name', '')}", "error": problem})
