"""The verdict on a granted GPU set: the seed's TSV columns as data and as pod annotations.

The verdict says whether the grant meets what the pod asked (its placement intent, recorded
in ``gpupair.io/verdict-placement`` next to the verdict):

- a *close* grant (every GPU on one NUMA node, worst link not SYS) is PASS under every intent;
- any other grant is FAIL under ``required``, and PASS under ``preferred`` or ``none``: those
  pods asked to run rather than wait, so a SYS pair is the expected price, not a failure. The
  link and NUMA annotations still show it, and only a FAIL raises a Warning Event.

A pod that asks a scope narrower than NUMA (``gpupair.io/scope``: ``pcie-switch``, ``nvlink``)
is judged the same way against it, and ``gpupair.io/verdict-scope`` names it beside the link
granted (``gpupair.io/link``): under ``required`` a pair that is close but not joined by NVLink
is FAIL for a pod that asked ``nvlink``.

A grant that names one GPU twice (time-slicing's replicas under ``nvidia.com/gpu``: a pod asking
two "GPUs" handed two replicas of one) is FAIL under every intent: the pod got fewer GPUs than it
asked. ``gpupair.io/granted`` shows the GPU twice (``GPU3+GPU3``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupair.topology import links
from gpupair.decide.pod.intent import Intent
from gpupair.topology.layout import NodeLayout
from gpupair.topology.nics import NicLayout
from gpupair.decide.devices.placement import numa_label
from gpupair.decide.pod.scope import Scope, within
from gpupair.topology.report import PREFIX

GRANTED_KEY = PREFIX + "granted"
PCI_KEY = PREFIX + "pci"
NUMA_KEY = PREFIX + "numa"
LINK_KEY = PREFIX + "link"
P2P_KEY = PREFIX + "p2p"
VERDICT_KEY = PREFIX + "verdict"
PLANNED_KEY = PREFIX + "planned"  # left by the extender at bind time
PLAN_MATCH_KEY = PREFIX + "plan-match"
VERDICT_PLACEMENT_KEY = PREFIX + "verdict-placement"  # the intent the verdict was judged against
VERDICT_SCOPE_KEY = PREFIX + "verdict-scope"  # the scope judged against, where the pod asked one beyond numa
GRANTED_NIC_KEY = PREFIX + "granted-nic"  # each granted GPU's nearest RDMA NIC and link: GPU0:mlx5_0=PIX GPU1:mlx5_0=PIX
NIC_LINK_KEY = PREFIX + "nic-link"  # the worst of those links: how close the network is for the pod

TSV_HEADER = ("round", "pod", "phase", "gpu_pair", "pci_pair", "numa_pair", "topo", "result")
PASS, FAIL, FAIL_PARSE = "PASS", "FAIL", "FAIL_PARSE"
NO_LINK = "-"  # one GPU has no pairwise link


@dataclass(frozen=True)
class Verdict:
    granted: str  # GPU0+GPU1
    pci: str  # 00000000:21:00.0+00000000:31:00.0
    numa: str  # NUMA0+NUMA0
    link: str  # worst pairwise link, or "-" for one GPU
    p2p: str  # supported | not-supported | unknown
    result: str  # PASS | FAIL
    plan_match: str | None = None  # "true" | "false" when the extender left a plan
    placement: str = Intent.REQUIRED.value  # the intent judged against
    close: bool = True  # one NUMA node, no SYS link: what ``required`` demands
    nic: str | None = None  # None: the node's NICs are not known
    nic_link: str | None = None
    scope: str = Scope.NUMA.value  # the scope judged against

    def annotations(self) -> dict[str, str]:
        values = {
            GRANTED_KEY: self.granted,
            PCI_KEY: self.pci,
            NUMA_KEY: self.numa,
            LINK_KEY: self.link,
            P2P_KEY: self.p2p,
            VERDICT_KEY: self.result,
            VERDICT_PLACEMENT_KEY: self.placement,
        }
        if self.plan_match is not None:
            values[PLAN_MATCH_KEY] = self.plan_match
        if self.scope != Scope.NUMA.value:
            values[VERDICT_SCOPE_KEY] = self.scope
        if self.nic is not None and self.nic_link is not None:
            values[GRANTED_NIC_KEY] = self.nic
            values[NIC_LINK_KEY] = self.nic_link
        return values

    def tsv_row(self, round_label: str, pod: str, phase: str) -> str:
        return "\t".join(
            (round_label, pod, phase, self.granted, self.pci, self.numa, self.link, self.result)
        )


def format_set(indices: tuple[int, ...] | list[int]) -> str:
    return "+".join(f"GPU{i}" for i in sorted(indices))


def parse_set(text: str) -> tuple[int, ...]:
    """Inverse of format_set: "GPU0+GPU1" -> (0, 1)."""
    members = []
    for part in text.split("+"):
        part = part.strip()
        if not part.startswith("GPU") or not part[3:].isdigit():
            raise ValueError(f"not a GPU set: {text!r}")
        members.append(int(part[3:]))
    return tuple(sorted(members))


def classify(
    layout: NodeLayout, granted: tuple[int, ...] | list[int], planned: tuple[int, ...] | None = None,
    intent: Intent = Intent.REQUIRED, nics: NicLayout | None = None, scope: Scope = Scope.NUMA,
) -> Verdict:
    members = tuple(sorted(set(granted)))
    if not members:
        raise ValueError("no GPUs granted")
    named_twice = len(members) < len(granted)
    for i in members:
        if not 0 <= i < layout.size:
            raise ValueError(f"GPU{i} is not on this node (it has {layout.size})")
    worst = layout.worst_link(members)
    numas = [layout.numa_of(i) for i in members]
    p2p = layout.p2p_of(members)
    same_numa = len(set(numas)) == 1
    close = same_numa and (worst is None or not links.crosses_sockets(worst)) and within(layout, members, scope)
    result = PASS if (close or intent is not Intent.REQUIRED) and not named_twice else FAIL
    return Verdict(
        granted=format_set(list(granted)),
        pci="+".join(layout.devices[i].pci_bus_id or "unknown" for i in members),
        numa="+".join(numa_label(n) for n in numas),
        link=worst or NO_LINK,
        p2p="unknown" if p2p is None else ("supported" if p2p else "not-supported"),
        result=result,
        plan_match=None if planned is None else str(tuple(sorted(planned)) == members).lower(),
        placement=intent.value,
        close=close,
        scope=scope.value,
        **nic_facts(nics, members),
    )


def nic_facts(nics: NicLayout | None, members: tuple[int, ...]) -> dict[str, str | None]:
    """``nic`` and ``nic_link`` for the granted GPUs; none where the NICs are unknown, ``-``
    where the node has none."""
    if nics is None:
        return {}
    if not nics.nics:
        return {"nic": NO_LINK, "nic_link": NO_LINK}
    nearest = {i: nics.nearest(i) for i in members}
    if any(found is None for found in nearest.values()):
        return {}
    text = " ".join(f"GPU{i}:{name}={label}" for i, (name, label) in nearest.items())
    return {"nic": text, "nic_link": links.worst(label for _, label in nearest.values())}
