"""Who tells whom among the extender's caches, in one place.

Every change flows one way, from a watch to the caches that keep something derived from it,
each told in the order subscribed here:

- a Node listed, changed or deleted: ``NodeCache`` tells its object listeners (``ClusterUsage``:
  the node's CPU and product label), then, when the node's entry changed, ``HoldsByReport`` (the
  holds its ledger ends), ``DecisionTables`` and ``ScoreRows``;
- a hold taken or ended: ``Reservations`` tells ``DecisionTables``;
- a Lease renewed: ``Heartbeats`` tells ``DecisionTables`` and ``ScoreRows``;
- a pod: ``PodWatch`` tells ``ClusterUsage`` and ``DefragHolds`` (a claimant seen, or seen bound),
  then keeps its own holds and requests;
- the defrag plans ConfigMap: ``DefragHolds`` keeps its holds in ``Reservations`` (which tells
  ``DecisionTables``, as for any hold);
- a node's CPU left or label: ``ClusterUsage`` tells ``ScoreRows``.

``wire_caches`` builds what every score needs; ``wire_usage`` adds what the fragmentation score
keeps, only under ``--score fragmentation`` (numpy is imported for it alone).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpupair.decide.judge.decisions import Decider
from gpupair.decide.judge.reservations import Reservations
from gpupair.decide.picture.node_picture import NodePicture
from gpupair.extender.cache.decision_tables import DecisionTables
from gpupair.extender.cache.defrag_holds import DefragHolds
from gpupair.extender.cache.node_cache import HoldsByReport, NodeCache
from gpupair.extender.cache.node_leases import Heartbeats
from gpupair.extender.cache.pod_request_cache import PodRequests
from gpupair.extender.cache.pod_watch import PodWatch
from gpupair.kubewire.defaults import RESOURCE_NAME

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gpupair.extender.cache.cluster_usage import ClusterUsage
    from gpupair.extender.cache.score_rows import ScoreRows
    from gpupair.extender.unallocatable import UnallocatableClaims


@dataclass
class Caches:
    """The caches every score reads; None where the extender runs without that feed."""

    requests: PodRequests
    nodes: NodeCache | None = None  # --no-node-cache: None
    tables: DecisionTables | None = None  # over ``nodes``
    heartbeats: Heartbeats | None = None  # the reporters' Leases, where asked for
    pods: PodWatch | None = None  # None without an API server
    defrag: DefragHolds | None = None  # the defrag plans' holds; needs the pod watch


def wire_caches(decider: Decider, picture: NodePicture, reservations: Reservations, resource: str,
                clock: Callable[[], float], *, node_cache: bool, heartbeats: Heartbeats | None, pod_watch: bool,
                unallocatable: UnallocatableClaims | None = None, defrag_plans: bool = False) -> Caches:
    """``heartbeats``: made before the picture, which reads a node's life from it;
    ``unallocatable``: DRA only, told of each unbound pod by the pod watch; ``defrag_plans``:
    hold what defrag plans free (fed by a list+watch the caller runs on ``Caches.defrag``)."""
    caches = Caches(PodRequests(resource, claims=picture.pod_demand), heartbeats=heartbeats)
    if node_cache:
        nodes = caches.nodes = NodeCache(picture, clock)
        tables = caches.tables = DecisionTables(decider, nodes.items, nodes.get, picture.alive,
                                                reservations.by_node)
        reservations.subscribe(tables.hold_changed)
        nodes.subscribe(HoldsByReport(reservations))
        nodes.subscribe(tables)
        if heartbeats is not None:
            heartbeats.subscribe(lambda name: tables.node_alive(name, clock()))
    if pod_watch:
        caches.pods = PodWatch(reservations, caches.requests, unallocatable)
        if defrag_plans:
            caches.defrag = DefragHolds(reservations, clock)
            caches.pods.subscribe(caches.defrag)
    return caches


def wire_usage(caches: Caches, picture: NodePicture, *, claims: bool,
               shared_resources: Sequence[str], resource: str = RESOURCE_NAME) -> tuple[ClusterUsage, ScoreRows | None]:
    """What the fragmentation score keeps: each node's CPU and the cluster's workload, fed by the
    node cache and the pod watch, and (with a node cache) the score's inputs as rows. ``claims``:
    a DRA driver's claims say which products a pod accepts too; ``resource``: the whole-GPU
    resource."""
    from gpupair.extender.cache.cluster_usage import ClusterUsage, claims_accept, claims_share  # numpy, only for this score

    usage = ClusterUsage(caches.requests.of, claims_accept(picture) if claims else None, shared_resources,
                         claims_share(picture) if claims else None, resource)
    rows = None
    if caches.nodes is not None:
        from gpupair.extender.cache.score_rows import ScoreRows

        caches.nodes.subscribe_objects(usage)
        rows = ScoreRows(caches.nodes.get, picture.alive, usage)
        usage.subscribe(rows.changed)
        caches.nodes.subscribe(rows)
        if caches.heartbeats is not None:
            caches.heartbeats.subscribe(rows.changed)
    if caches.pods is not None:
        caches.pods.subscribe(usage)
    return usage, rows
