"""Who picks whole GPUs on the chosen node, and gpupair's extender over a trace's nodes.

A node's whole-GPU picture is its layout and its free mask (GPUs with nothing taken), so every
answer that depends on it alone is worked out once per (layout, mask, GPUs) and read back from a
table: gpupair's ``Decider`` (the extender's own filter and score), the picker's set, and whether
the set is as close as the node's shape allows. At 8 GPUs that is 256 masks a layout and size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpupair.decide.devices import placement
from gpupair.decide.judge.decisions import Decider, NodeView
from gpupair.decide.pod.intent import Intent
from gpupair.decide.devices.pickers import DEVICE_PLUGIN, Picker
from gpupair.decide.devices.policies import POLICIES, Policy
from gpupair.simulator.configs import DRA
from gpupair.simulator.models.dynamic_resources import FORMS
from gpupair.topology import links
from gpupair.topology.layout import NodeLayout, NodeState

def picker(path: str, plugin: str, gpupair: bool) -> Policy:
    """The device plugin's policy on its path; on DRA the allocator's first fit, in the claim the
    webhook writes under ``required`` when gpupair is installed (numaNode constraint)."""
    if path == DRA:
        return FORMS["claim-numa" if gpupair else "claim"].policy
    return POLICIES[plugin]


def _free(mask: int, size: int) -> frozenset[int]:
    return frozenset(g for g in range(size) if mask >> g & 1)


BOOLEAN = ("found", "close", "fits", "passes")
COLUMNS = (*BOOLEAN, "score", "pick_mask")


@dataclass
class Tables:
    """Per (layout, GPUs) a row per free mask: the pick, whether the allocator finds one, whether
    it is close, the extender's pass and score, and whether a close set is free at all. Rows are
    worked out the first time a mask is asked about: a 16-GPU layout has 65,536 masks, of which a
    replay meets a few."""

    layouts: list[NodeLayout]
    policy: Policy
    decider: Decider | None = None
    node_picker: Picker = DEVICE_PLUGIN  # who picks on the extender's nodes: the allocator on the DRA path
    intent: Intent = Intent.REQUIRED
    _built: dict[tuple[int, int], dict[str, np.ndarray]] = field(default_factory=dict)
    _picks: dict[tuple[int, int, int], tuple[int, ...] | None] = field(default_factory=dict)

    def _table(self, layout_id: int, gpus: int, masks: np.ndarray) -> dict[str, np.ndarray]:
        key = (layout_id, gpus)
        table = self._built.get(key)
        if table is None:
            size = 1 << self.layouts[layout_id].size
            table = {"known": np.zeros(size, dtype=bool),
                     **{name: np.zeros(size, dtype=bool if name in BOOLEAN else np.int64) for name in COLUMNS}}
            self._built[key] = table
        for mask in np.unique(masks[~table["known"][masks]]).tolist():
            self._row(layout_id, gpus, mask, table)
        return table

    def _row(self, layout_id: int, gpus: int, mask: int, table: dict[str, np.ndarray]) -> None:
        layout = self.layouts[layout_id]
        state = NodeState(layout, _free(mask, layout.size))
        pick = self.policy.pick(layout, state.free, gpus) if len(state.free) >= gpus else None
        self._picks[(layout_id, gpus, mask)] = pick
        table["found"][mask] = pick is not None
        table["pick_mask"][mask] = sum(1 << g for g in pick or ())
        table["close"][mask] = pick is not None and (gpus < 2 or placement.is_close(state, pick))
        table["fits"][mask] = gpus <= layout.size and placement.fit(state, gpus).feasible
        if self.decider is not None:
            decision = self.decider.decide(gpus, NodeView("n", state, picker=self.node_picker), self.intent)
            table["passes"][mask], table["score"][mask] = decision.passes, decision.score
        table["known"][mask] = True

    def lookup(self, what: str, layout_ids: np.ndarray, masks: np.ndarray, gpus: int) -> np.ndarray:
        """``what`` for each node (its layout and free mask)."""
        out = np.zeros(len(masks), dtype=bool if what in BOOLEAN else np.int64)
        for layout_id in np.unique(layout_ids).tolist():
            mine = layout_ids == layout_id
            out[mine] = self._table(layout_id, gpus, masks[mine])[what][masks[mine]]
        return out

    def pick(self, layout_id: int, mask: int, gpus: int) -> tuple[int, ...] | None:
        self._table(layout_id, gpus, np.array([mask], dtype=np.int64))
        return self._picks[(layout_id, gpus, mask)]


def crosses_sockets(layout: NodeLayout, devices: tuple[int, ...]) -> bool:
    worst = layout.worst_link(devices)
    return worst is not None and links.crosses_sockets(worst)


def gpupair_decider(path: str, plugin: str) -> Decider:
    """The extender as deployed, planning with the picker of its path."""
    return Decider(policy=POLICIES[plugin] if path != DRA else POLICIES["aligned"],
                   dra_policy=picker(path, plugin, True))
