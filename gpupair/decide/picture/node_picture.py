"""One node picture, several sources: where a node's state comes from, behind one interface.

A source gives, per node, a report entry (gpupair/decide/picture/node_entries.py): its layout, what is
free and what the pods there were allocated (the report's state and ledger), when it turns stale,
or why the node is unusable; the node's last sign of life beyond its report (a Lease renewal);
and, per pod, the devices and GPUs its own claims hold or ask. Two sources implement it:

- ``AnnotatedNodes``: the reporter's annotations on the Node, with the node's reporter Lease;
- ``DraNodes`` (gpupair/decide/picture/dra_source.py): a DRA driver's ResourceSlices and the allocated
  ResourceClaims.

``NodePicture`` puts sources in order (DRA first: where a driver publishes a node's GPUs, the
reporter's ``free`` annotation cannot see its grants) and is a source itself. The extender's verbs,
its node cache, its evaluator and ``gpupair status`` read a ``NodePicture`` that ``node_picture``
builds from the configuration; which sources are in it is chosen there, once, and no reader asks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from gpupair.decide.claims.claim_intent import ClaimIntent
from gpupair.decide.picture.dra_picture import Demand
from gpupair.decide.picture.dra_source import DraFeed, DraNodes
from gpupair.decide.picture.node_entries import ReportDecoder, ReportEntry
from gpupair.kubewire.defaults import GPU_DEVICE_CLASSES

ChangeListener = Callable[[set[str]], None]  # told the names of nodes whose picture changed


@runtime_checkable
class NodeSource(Protocol):
    """One source of the node picture."""

    @property
    def listed(self) -> bool:
        """Whether this source has its whole listing: before, a node it would describe may look
        like one it does not."""
        ...

    def describes(self, node: str) -> bool:
        """Whether this source describes the node from objects of its own (not from the Node's
        annotations, which the reader holds and passes to ``entry_of``)."""
        ...

    def entry_of(self, node: str, annotations: Mapping[str, Any] | None) -> ReportEntry | None:
        """The node's entry; ``annotations``: the Node's (None where no Node object is known).
        None where this source does not describe the node."""
        ...

    def alive(self, node: str) -> float | None:
        """The node's last sign of life beyond its report (epoch seconds), None if none."""
        ...

    def owned(self, uid: str, namespace: str = "", names: Iterable[str] = ()) -> dict[str, frozenset[int]]:
        """The devices pod ``uid``'s own claims (and those named ``names`` in ``namespace``) hold,
        by node, as layout indices."""
        ...

    def held_shares(self, pod: Any) -> dict[str, dict[int, int]]:
        """What the pod's own claims hold of each GPU, by node and layout index, in thousandths
        (a GPU shared by consumable capacity: what they consume of it)."""
        ...

    def pod_demand(self, pod: Any, known_only: bool = False) -> Demand | None:
        """The GPUs the pod's own claims ask and the allocator's policy; None without any.
        PodRequestError where a claim the pod names is not known yet, unless ``known_only``."""
        ...

    def pod_claim_intents(self, pod: Any) -> list[ClaimIntent]:
        """What the pod's own claims say of its placement."""
        ...

    def held_claim_intents(self, uid: str) -> list[ClaimIntent]:
        """What the allocated claims pod ``uid`` holds say of its placement."""
        ...

    def learn_claim(self, obj: dict[str, Any]) -> None:
        """A ResourceClaim read from the API ahead of this source's own watch."""
        ...

    def why_unallocatable(self, pod: Any) -> str:
        """Why no node of this source can allocate the pod's claims; "" where some node could,
        or this source cannot tell."""
        ...

    def subscribe(self, listener: ChangeListener) -> None:
        """Tell ``listener`` of each change this source sees on its own (not through the Node)."""
        ...


def _no_lease(node: str) -> float | None:
    return None


class AnnotatedNodes:
    """The reporter's source: the Node's report annotations, with the node's reporter Lease
    (``alive``: its last renewal). Pods hold devices here through the reporter's ledger, which is
    in the report; no claims."""

    def __init__(self, decoder: ReportDecoder, alive: Callable[[str], float | None] = _no_lease):
        self.decoder = decoder
        self._alive = alive

    listed = True  # the reader lists the Nodes, and their annotations, itself

    def describes(self, node: str) -> bool:
        return False  # a node's report is in its Node's annotations, which the reader holds

    def entry_of(self, node: str, annotations: Mapping[str, Any] | None) -> ReportEntry | None:
        return None if annotations is None else self.decoder.decode(annotations)

    def alive(self, node: str) -> float | None:
        return self._alive(node)

    def owned(self, uid: str, namespace: str = "", names: Iterable[str] = ()) -> dict[str, frozenset[int]]:
        return {}

    def held_shares(self, pod: Any) -> dict[str, dict[int, int]]:
        return {}

    def pod_demand(self, pod: Any, known_only: bool = False) -> Demand | None:
        return None

    def pod_claim_intents(self, pod: Any) -> list[ClaimIntent]:
        return []

    def held_claim_intents(self, uid: str) -> list[ClaimIntent]:
        return []

    def learn_claim(self, obj: dict[str, Any]) -> None:
        pass  # no claims here

    def why_unallocatable(self, pod: Any) -> str:
        return ""

    def subscribe(self, listener: ChangeListener) -> None:
        pass  # a report changes with its Node, which the reader watches itself


class NodePicture:
    """Sources in order: a node's entry is the first source's that describes it; a pod's claims
    are what the sources say together."""

    def __init__(self, *sources: NodeSource):
        self.sources = sources

    @property
    def listed(self) -> bool:
        return all(source.listed for source in self.sources)

    def describes(self, node: str) -> bool:
        return any(source.describes(node) for source in self.sources)

    def entry_of(self, node: str, annotations: Mapping[str, Any] | None) -> ReportEntry | None:
        for source in self.sources:
            entry = source.entry_of(node, annotations)
            if entry is not None:
                return entry
        return None

    def alive(self, node: str) -> float | None:
        for source in self.sources:
            at = source.alive(node)
            if at is not None:
                return at
        return None

    def owned(self, uid: str, namespace: str = "", names: Iterable[str] = ()) -> dict[str, frozenset[int]]:
        names = tuple(names)
        found: dict[str, frozenset[int]] = {}
        for source in self.sources:
            for node, devices in source.owned(uid, namespace, names).items():
                found[node] = found.get(node, frozenset()) | devices
        return found

    def held_shares(self, pod: Any) -> dict[str, dict[int, int]]:
        return {node: held for source in self.sources for node, held in source.held_shares(pod).items()}

    def pod_demand(self, pod: Any, known_only: bool = False) -> Demand | None:
        for source in self.sources:
            demand = source.pod_demand(pod, known_only)
            if demand is not None:
                return demand
        return None

    def pod_claim_intents(self, pod: Any) -> list[ClaimIntent]:
        return [said for source in self.sources for said in source.pod_claim_intents(pod)]

    def held_claim_intents(self, uid: str) -> list[ClaimIntent]:
        return [said for source in self.sources for said in source.held_claim_intents(uid)]

    def learn_claim(self, obj: dict[str, Any]) -> None:
        for source in self.sources:
            source.learn_claim(obj)

    def why_unallocatable(self, pod: Any) -> str:
        return next((why for source in self.sources if (why := source.why_unallocatable(pod))), "")

    def subscribe(self, listener: ChangeListener) -> None:
        for source in self.sources:
            source.subscribe(listener)


def node_picture(decoder: ReportDecoder, clock: Callable[[], float], *, dra_driver: str = "",
                 gpu_classes: frozenset[str] = GPU_DEVICE_CLASSES, nic_drivers: frozenset[str] = frozenset(),
                 alive: Callable[[str], float | None] = _no_lease,
                 logger: logging.Logger | None = None) -> tuple[NodePicture, DraFeed | None]:
    """The node picture the configuration asks for, and what feeds its DRA source (None without
    one): with ``dra_driver``, that driver's ResourceSlices and the ResourceClaims first
    (``gpu_classes``: the DeviceClasses whose devices are GPUs; ``nic_drivers``: RDMA drivers
    whose devices are the NICs; ``logger``: where what it leaves out is told), then the Nodes'
    annotations with ``alive``, their reporter Leases."""
    annotated = AnnotatedNodes(decoder, alive)
    if not dra_driver:
        return NodePicture(annotated), None
    devices = DraNodes(dra_driver, decoder, clock, gpu_classes, nic_drivers, logger)
    return NodePicture(devices, annotated), devices
