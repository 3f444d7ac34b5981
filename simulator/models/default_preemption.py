"""kube-scheduler's default preemption on the simulated cluster, and where gpupair's preempt verb
plugs in.

It follows DefaultPreemption's PostFilter in kube-scheduler v1.36
(pkg/scheduler/framework/preemption/preemption.go, plugins/defaultpreemption):

- it runs only for a pod that fits no node, and only if the pod may preempt (a priority above
  some running pod's);
- per candidate node (SelectVictimsOnNode): remove every lower-priority pod; if the pod still
  does not fit by the scheduler's own filters (NodeResourcesFit: GPUs by count, cpu, memory;
  never an extender's, so never NUMA), the node is no candidate; else add the removed pods back,
  most important first (higher priority, then earlier start), keeping each that leaves the pod
  fitting; the rest are the victims. A node needing no victim is no candidate;
- extenders with a preempt verb (gpupair's, when registered) then see every candidate and its
  victims, and may drop nodes or trim their victims (callExtenders);
- the node is picked by pickOneNodeForPreemption's criteria: lowest highest-victim priority,
  smallest sum of victims' priorities, fewest victims, latest start of the highest-priority
  victims; ties go to the first node in Go's map order, i.e. at random.

On the DRA path the dry run also runs the allocator (DynamicResources' Filter) on the devices the
staying pods' claims leave free: a victim's claim, reserved for it alone, is freed with it.

Simplified: no PodDisruptionBudgets (every candidate violates none, the first criterion ties);
every node is a candidate (kube-scheduler samples max(10% of nodes, 100), all of them below 100
nodes); a node is unresolvable only when its hardware has fewer GPUs than asked; victims go at
once (no graceful termination), are gone for good (no controller recreates them) and the
preemptor retries at the next step with its nominated node tried first; pods nominated to a node
count against it for pods of lower or equal priority, as kube-scheduler's filters with nominated
pods do.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpupair.decide.pod.intent import Intent
from gpupair.decide.devices.policies import Policy
from gpupair.simulator.cluster import Cluster, SimNode
from gpupair.simulator.models.kube_scoring import NodeUsage, PodRequest

HIGH_PRIORITY = 1000  # a PriorityClass value for the pods that may preempt; the rest run at 0
_OFFSET = 2**31  # pickOneNodeForPreemption adds MaxInt32+1 to each priority before summing


@dataclass(frozen=True)
class Running:
    """What preemption reads of a pod that runs: its priority and when it started (a step)."""

    priority: int
    start: int


# gpupair's preempt verb as the scheduler calls it: the pod's GPUs and intent, every candidate
# node with its victims (most important first), the cluster; back: the nodes kept, victims trimmed.
PreemptVerb = Callable[[int, Intent, dict[str, list[str]], Cluster], dict[str, list[str]]]


@dataclass(frozen=True)
class PreemptionResult:
    node: str | None  # None: no node was chosen, nothing is evicted
    victims: tuple[str, ...] = ()
    candidates: int = 0  # nodes left after the verb
    proposed: int = 0  # nodes kube-scheduler's dry run proposed


def select_victims(sim: SimNode, request: PodRequest, priority: int, running: Mapping[str, Running],
                   nominated: Sequence[PodRequest] = (), allocator: Policy | None = None) -> list[str]:
    """SelectVictimsOnNode: the fewest lower-priority pods, most important reprieved first, whose
    removal lets the pod fit by count (and cpu, memory); empty if none does or none is needed.
    ``allocator``: on the DRA path DynamicResources' Filter runs in the dry run too, on the
    devices the staying pods' claims leave free."""
    lower = [pod for pod in sim.bound if pod in running and running[pod].priority < priority]
    if not lower:
        return []
    allocatable = sim.usage().allocatable
    staying = {pod: req for pod, req in sim.bound.items() if pod not in set(lower)}

    def fits() -> bool:
        if not NodeUsage.of(allocatable, [*staying.values(), *nominated]).fits(request):
            return False
        if allocator is None or request.gpus <= 0:
            return True
        taken = {device for pod in staying for device in sim.allocated.get(pod, ())}
        free = frozenset(range(sim.layout.size)) - taken
        return allocator.pick(sim.layout, free, request.gpus) is not None

    if not fits():
        return []
    victims = []
    for pod in sorted(lower, key=lambda p: (-running[p].priority, running[p].start, p)):
        staying[pod] = sim.bound[pod]
        if not fits():
            del staying[pod]
            victims.append(pod)
    return victims


def pick_node(candidates: Mapping[str, Sequence[str]], running: Mapping[str, Running], rng: random.Random) -> str:
    """pickOneNodeForPreemption with no PDBs: each criterion keeps the best nodes, in order."""

    def highest(node: str) -> int:
        return max(running[v].priority for v in candidates[node])

    criteria: list[Callable[[str], int]] = [
        lambda node: -highest(node),
        lambda node: -sum(running[v].priority + _OFFSET for v in candidates[node]),
        lambda node: -len(candidates[node]),
        # the earliest start among the highest-priority victims: the later, the better
        lambda node: min(running[v].start for v in candidates[node] if running[v].priority == highest(node)),
    ]
    nodes = list(candidates)
    for score in criteria:
        best = max(score(node) for node in nodes)
        nodes = [node for node in nodes if score(node) == best]
        if len(nodes) == 1:
            return nodes[0]
    return rng.choice(nodes)


def preempt(request: PodRequest, priority: int, intent: Intent, cluster: Cluster, running: Mapping[str, Running],
            nominated: Mapping[str, Sequence[PodRequest]], rng: random.Random,
            verb: PreemptVerb | None = None, allocator: Policy | None = None) -> PreemptionResult:
    """Default preemption for a pod that fits no node: the node and victims chosen, if any
    (``allocator``: the DRA path's, for the dry run's DynamicResources Filter)."""
    candidates: dict[str, list[str]] = {}
    for name, sim in cluster.nodes.items():
        if sim.layout.size < request.gpus:
            continue  # unresolvable: no eviction makes room
        victims = select_victims(sim, request, priority, running, nominated.get(name, ()), allocator)
        if victims:
            candidates[name] = victims
    proposed = len(candidates)
    if verb is not None and candidates and request.gpus > 0:
        candidates = verb(request.gpus, intent, candidates, cluster)
    if not candidates:
        return PreemptionResult(None, (), 0, proposed)
    node = pick_node(candidates, running, rng)
    return PreemptionResult(node, tuple(candidates[node]), len(candidates), proposed)
