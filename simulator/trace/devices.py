"""Who picks whole GPUs on the chosen node, and gpupair's extender over a trace's nodes.

A node's whole-GPU picture is its layout and its free mask (GPUs with nothing taken), so every
answer that depends on it alone is worked out once per (layout, mask, GPUs) and read back from a
table: gpupair's ``Decider`` (the extender's own filter and score), the picker's set, and whether
the set is as close as the node's shape allows. At 8 GPUs that is 256 masks a layout and size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpupair.decide import placement
from gpupair.decide.decisions import DRA, Decider, NodeView
from gpupair.decide.intent import Intent
from gpupair.decide.policies import POLICIES, Policy
from gpupair.simulator.dra import FORMS
from gpupair.topology import links
from gpupair.topology.layout import NodeLayout, NodeState

DEVICE_PLUGIN = "device-plugin"


def picker(path: str, plugin: str, gpupair: bool) -> Policy:
    """The device plugin's policy on its path; on DRA the allocator's first fit, in the claim the
    webhook writes under ``required`` when gpupair is installed (numaNode constraint)."""
    if path == DRA:
        return FORMS["claim-numa" if gpupair else "claim"].policy
    return POLICIES[plugin]


def _free(mask: int, size: int) -> frozenset[int]:
    return frozenset(g for g in range(size) if mask >> g & 1)


@dataclass
class Tables:
    """Per (layout, GPUs) a row per free mask: the pick, whether it is close, the extender's
    pass and score, and whether a close set is free at all."""

    layouts: list[NodeLayout]
    policy: Policy
    decider: Decider | None = None
    source: str = "reporter"
    intent: Intent = Intent.REQUIRED
    _built: dict[tuple[int, int], dict[str, np.ndarray | list]] = field(default_factory=dict)

    def _table(self, layout_id: int, gpus: int) -> dict:
        key = (layout_id, gpus)
        if key not in self._built:
            layout = self.layouts[layout_id]
            masks = range(1 << layout.size)
            picks, close, passes, scores, fits = [], [], [], [], []
            for mask in masks:
                state = NodeState(layout, _free(mask, layout.size))
                pick = self.policy.pick(layout, state.free, gpus) if len(state.free) >= gpus else None
                picks.append(pick)
                close.append(pick is not None and (gpus < 2 or placement.is_close(state, pick)))
                fits.append(gpus <= layout.size and placement.fit(state, gpus).feasible)
                if self.decider is not None:
                    decision = self.decider.decide(gpus, NodeView("n", state, source=self.source), self.intent)
                    passes.append(decision.passes)
                    scores.append(decision.score)
            self._built[key] = {"pick": picks, "found": np.array([p is not None for p in picks]),
                                "pick_mask": np.array([sum(1 << g for g in p or ()) for p in picks], dtype=np.int64),
                                "close": np.array(close), "fits": np.array(fits),
                                "passes": np.array(passes, dtype=bool), "score": np.array(scores, dtype=np.int64)}
        return self._built[key]

    def lookup(self, what: str, layout_ids: np.ndarray, masks: np.ndarray, gpus: int) -> np.ndarray:
        """``what`` for each node (its layout and free mask)."""
        out = np.zeros(len(masks), dtype=bool if what in ("found", "close", "fits", "passes") else np.int64)
        for layout_id in np.unique(layout_ids):
            mine = layout_ids == layout_id
            out[mine] = self._table(int(layout_id), gpus)[what][masks[mine]]
        return out

    def pick(self, layout_id: int, mask: int, gpus: int) -> tuple[int, ...]:
        return self._table(layout_id, gpus)["pick"][mask]


def crosses_sockets(layout: NodeLayout, devices: tuple[int, ...]) -> bool:
    worst = layout.worst_link(devices)
    return worst is not None and links.crosses_sockets(worst)


def gpupair_decider(path: str, plugin: str) -> Decider:
    """The extender as deployed, planning with the picker of its path."""
    return Decider(policy=POLICIES[plugin] if path != DRA else POLICIES["aligned"],
                   dra_policy=picker(path, plugin, True))
