"""Which movable pods to move so that a waiting pod gets a close set. Pure.

A pod is placed well only when it arrives; after churn the free GPUs are scattered and a large
pod waits although the fleet has room. The planner looks for the fewest moves (then the fewest
GPUs moved) after which:

- the waiting pod fits a close set on one node (the set is held for it), and
- every moved pod has a close set elsewhere *now* (a place free before anything moves, or the
  rest of the freed node), so a move never makes a new waiting pod and never chains.

How: on each node, for each union of the fewest NUMA nodes that could hold the pod, the GPUs
it lacks are cleared by the fewest movable pods (per GPU the largest shares first; a GPU under a
pod that may not move is never cleared). Every combination of GPUs to clear is a candidate, and
the candidates are tried cheapest first until one whose moved pods all find a place. A node's
GPUs make the combinations few (at most C(8,4) for a 16-GPU node's half).

Bounded: at most ``SearchBound.moves`` moves in a plan, and at most ``SearchBound.candidates`` candidates
checked for places per waiting pod, so a call's time has a ceiling whatever the fleet. When
nothing is found the answer says why, by the count of nodes each obstacle ruled out.

Several waiting pods: ``plan_all`` plans them in turn on the picture the earlier plans leave
(freed sets and moved pods' places held), so no GPU is planned twice and no pod moves twice.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

from gpupair.decide.defrag.close_sets import close_set, numa_groups
from gpupair.decide.defrag.fleet import Ask, Move, NodeRoom, NoDefragPlan, DefragPlan, PlacedPod, WaitingPod
from gpupair.decide.score.fragmentation import MILLI

# Why a node gave no candidate, as the answer words it.
NOT_ALLOWED = "may not run it"
TOO_SMALL = "have too few GPUs"
NO_CPU = "lack CPU or memory even with their movable pods gone"
PINNED = "hold a pod that may not move on every such set"
TOO_MANY = "need more moves than the bound"
NO_PLACE = "free a set only by moving a pod that has no place elsewhere"


@dataclass(frozen=True)
class SearchBound:
    moves: int = 4  # moves in one plan
    candidates: int = 2048  # freed sets checked for the moved pods' places, per waiting pod


@dataclass(frozen=True)
class _Candidate:
    key: tuple[int, int, int]  # moves, GPUs moved, node order
    node: str
    pods: tuple[PlacedPod, ...]
    devices: tuple[int, ...]  # the waiting pod's set once they are gone


class Planner:
    def __init__(self, nodes: Sequence[NodeRoom], pods: Iterable[PlacedPod], bound: SearchBound = SearchBound()):
        self.order = [node.name for node in nodes]
        self.rooms = {node.name: node for node in nodes}
        self.bound = bound
        self.on: dict[str, list[PlacedPod]] = defaultdict(list)
        for pod in pods:
            if pod.node in self.rooms and pod.devices:
                self.on[pod.node].append(pod)
        self._fitting: dict[Ask, list[str]] = {}
        self._gpu_fitting: dict[tuple[int, int], list[str]] = {}

    # -- one waiting pod -------------------------------------------------------------------

    def plan(self, waiting: WaitingPod) -> DefragPlan | NoDefragPlan:
        ask = waiting.ask
        if ask.gpus <= 0:
            return NoDefragPlan(waiting, "asks no GPU: moving GPU pods cannot help it")
        ruled_out: Counter[str] = Counter()
        candidates: list[_Candidate] = []
        for position, name in enumerate(self.order):
            room = self.rooms[name]
            if not ask.may_run_on(name):
                ruled_out[NOT_ALLOWED] += 1
                continue
            if not numa_groups(room.layout, ask.gpus):
                ruled_out[TOO_SMALL] += 1
                continue
            if room.has_room(ask):
                now = close_set(room.layout, room.left, ask.gpus, ask.milli)
                if now is not None:
                    return DefragPlan(waiting, name, now, ())
            found, why = self._candidates(room, position, ask)
            candidates += found
            if not found:
                ruled_out[why] += 1
        candidates.sort(key=lambda c: c.key)
        tried = 0
        for candidate in candidates:
            if tried == self.bound.candidates:
                return NoDefragPlan(waiting, self._reason(ask, ruled_out, len(candidates), tried, stopped=True))
            tried += 1
            moves = self._places(candidate, ask)
            if moves is not None:
                return DefragPlan(waiting, candidate.node, candidate.devices, moves)
        ruled_out[NO_PLACE] += len({c.node for c in candidates})
        return NoDefragPlan(waiting, self._reason(ask, ruled_out, len(candidates), tried))

    def _candidates(self, room: NodeRoom, position: int, ask: Ask) -> tuple[list[_Candidate], str]:
        """Every cheapest way on this node to clear a close set, within the bound on moves."""
        pods = self.on.get(room.name, [])
        holders: dict[int, list[PlacedPod]] = defaultdict(list)
        for pod in pods:
            for device in pod.devices:
                holders[device].append(pod)
        # Per GPU, the fewest pods whose going leaves ``milli`` on it: None where it cannot.
        clear: dict[int, tuple[PlacedPod, ...] | None] = {}
        for device in range(room.layout.size):
            clear[device] = _clearing(room.left[device], holders[device], ask.milli, self.bound.moves)
        found: dict[tuple[str, ...], _Candidate] = {}
        why = PINNED
        for group in numa_groups(room.layout, ask.gpus):
            ready = [d for d in group if clear[d] == ()]
            need = ask.gpus - len(ready)
            clearable = [d for d in group if clear[d]]
            if need <= 0:  # the GPUs are there; CPU or memory is not
                why = NO_CPU
                continue
            if len(clearable) < need:
                continue
            for chosen in combinations(clearable, need):
                going: dict[str, PlacedPod] = {}
                for device in chosen:
                    going.update((pod.uid, pod) for pod in clear[device])
                if len(going) > self.bound.moves:
                    why = TOO_MANY
                    continue
                cpu = sum(pod.ask.cpu for pod in going.values())
                memory = sum(pod.ask.memory for pod in going.values())
                if not room.changed(list(room.left), cpu, memory).has_room(ask):
                    why = NO_CPU
                    continue
                identity = tuple(sorted(going))
                moved = tuple(going[uid] for uid in identity)
                candidate = _Candidate((len(moved), sum(p.gpus_held for p in moved), position), room.name,
                                       moved, _waiting_set(room, moved, ask, group))
                if identity not in found or candidate.key < found[identity].key:
                    found[identity] = candidate
        return list(found.values()), why

    def _places(self, candidate: _Candidate, ask: Ask) -> tuple[Move, ...] | None:
        """A close set now for each moved pod, largest first, with the waiting pod's set held;
        None where one has none."""
        source = _without(self.rooms[candidate.node], candidate.pods)
        left = list(source.left)
        for device in candidate.devices:
            left[device] -= ask.milli
        trial = {candidate.node: source.changed(left, -ask.cpu, -ask.memory)}
        moves = []
        for pod in sorted(candidate.pods, key=lambda p: (-p.ask.gpus, -p.ask.milli, p.uid)):
            target = self._place(pod.ask, trial)
            if target is None:
                return None
            name, devices = target
            room = trial.get(name, self.rooms[name])
            left = list(room.left)
            for device in devices:
                left[device] -= pod.ask.milli
            trial[name] = room.changed(left, -pod.ask.cpu, -pod.ask.memory)
            moves.append(Move(pod, name, devices))
        return tuple(moves)

    def _place(self, ask: Ask, trial: dict[str, NodeRoom]) -> tuple[str, tuple[int, ...]] | None:
        """The first node in order with a close set for ``ask``: nodes the plan has not touched
        from a list made once per ask, then those it has (their room is the plan's)."""
        for name in self._fitting_now(ask):
            if name not in trial:
                return name, _fits(self.rooms[name], ask)
        for name, room in trial.items():
            devices = _fits(room, ask)
            if devices is not None:
                return name, devices
        return None

    def _fitting_now(self, ask: Ask) -> list[str]:
        """The nodes ``ask`` fits now, in order: from the nodes with a close set of its GPUs (one
        scan per GPU shape; few nodes when the fleet is full), those with its CPU and memory."""
        fitting = self._fitting.get(ask)
        if fitting is None:
            shape = (ask.gpus, ask.milli)
            if shape not in self._gpu_fitting:
                self._gpu_fitting[shape] = [
                    name for name in self.order
                    if close_set(self.rooms[name].layout, self.rooms[name].left, ask.gpus, ask.milli) is not None]
            fitting = self._fitting[ask] = [name for name in self._gpu_fitting[shape]
                                            if _fits(self.rooms[name], ask) is not None]
        return fitting

    def _reason(self, ask: Ask, ruled_out: Counter[str], candidates: int, tried: int, stopped: bool = False) -> str:
        what = f"{ask.gpus} whole GPU{'s' if ask.gpus != 1 else ''}" if ask.milli == MILLI else \
            f"{ask.milli} milli of one GPU"
        if stopped:
            return (f"no plan for {what} within the bound: {candidates} ways to free a set within "
                    f"{self.bound.moves} moves, the first {tried} checked, none leaving every moved pod a place")
        parts = [f"{count} node{'s' if count != 1 else ''} {why}" for why, count in ruled_out.most_common() if count]
        return f"no plan for {what} within {self.bound.moves} moves: " + "; ".join(parts or ["no node"])

    # -- several waiting pods --------------------------------------------------------------

    def plan_all(self, waiting: Sequence[WaitingPod]) -> list[DefragPlan | NoDefragPlan]:
        """Each waiting pod in turn, on the picture the plans before it leave."""
        answers = []
        for pod in waiting:
            answer = self.plan(pod)
            if isinstance(answer, DefragPlan):
                self.commit(answer)
            answers.append(answer)
        return answers

    def commit(self, plan: DefragPlan) -> None:
        """Take the plan as done: its moved pods at their new places, its set held."""
        gone = {move.pod.uid for move in plan.moves}
        self.rooms[plan.node] = _without(self.rooms[plan.node], [move.pod for move in plan.moves])
        self.on[plan.node] = [pod for pod in self.on[plan.node] if pod.uid not in gone]
        held = PlacedPod(plan.waiting.uid, plan.node, plan.devices, plan.waiting.ask, movable=False)
        for pod, node, devices in [(held, plan.node, plan.devices),
                                   *((replace_at(m.pod, m.node, m.devices), m.node, m.devices) for m in plan.moves)]:
            room = self.rooms[node]
            left = list(room.left)
            for device in devices:
                left[device] -= pod.ask.milli
            self.rooms[node] = room.changed(left, -pod.ask.cpu, -pod.ask.memory)
            self.on[node].append(pod)
        self._fitting.clear()
        self._gpu_fitting.clear()


def replace_at(pod: PlacedPod, node: str, devices: tuple[int, ...]) -> PlacedPod:
    """The moved pod's replacement, held at its new place; it does not move again in this round."""
    return PlacedPod(pod.uid, node, devices, pod.ask, movable=False)


def _clearing(left: int, holders: list[PlacedPod], milli: int, most: int) -> tuple[PlacedPod, ...] | None:
    """The fewest holders whose going leaves ``milli`` on the GPU: () when it already has; None
    when it cannot (a holder that may not move is in the way, or more than ``most`` must go)."""
    if left >= milli:
        return ()
    going = []
    for pod in sorted((p for p in holders if p.movable), key=lambda p: (-p.ask.milli, p.uid)):
        if left >= milli or len(going) == most:
            break
        going.append(pod)
        left += pod.ask.milli
    return tuple(going) if left >= milli else None


def _without(room: NodeRoom, pods: Iterable[PlacedPod]) -> NodeRoom:
    left = list(room.left)
    cpu = memory = 0
    for pod in pods:
        for device in pod.devices:
            left[device] += pod.ask.milli
        cpu += pod.ask.cpu
        memory += pod.ask.memory
    return room.changed(left, cpu, memory)


def _waiting_set(room: NodeRoom, moved: Sequence[PlacedPod], ask: Ask, group: tuple[int, ...]) -> tuple[int, ...]:
    """The set the waiting pod gets once ``moved`` are gone: the close set within ``group``."""
    after = _without(room, moved)
    within = tuple(value if device in group else -1 for device, value in enumerate(after.left))
    devices = close_set(room.layout, within, ask.gpus, ask.milli)
    assert devices is not None, "the cleared GPUs hold the pod"
    return devices


def _fits(room: NodeRoom, ask: Ask) -> tuple[int, ...] | None:
    if not ask.may_run_on(room.name) or not room.has_room(ask):
        return None
    return close_set(room.layout, room.left, ask.gpus, ask.milli)
