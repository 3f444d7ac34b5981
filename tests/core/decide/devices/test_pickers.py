"""Each node carries its picker (gpupair/decide/devices/pickers.py); the Decider asks it which policy
runs there, whether a free close set is enough, and what to call it in a reason."""

from __future__ import annotations

from gpupair.decide.judge.decisions import Decider, NodeView
from gpupair.decide.pod.intent import Intent
from gpupair.decide.devices.pickers import ALLOCATOR, DEVICE_PLUGIN
from gpupair.decide.devices.policies import POLICIES
from gpupair.topology.layout import NodeState
from tests.layouts import seed_layout

# Both pickers take the first free devices in index order: only who picks differs.
DECIDER = Decider(policy=POLICIES["naive"], dra_policy=POLICIES["dra-first-fit"])
FREE = frozenset({3, 4, 5})  # the first two free straddle NUMA0 and NUMA1; GPU4+GPU5 is close


def test_each_picker_runs_its_own_policy_of_the_decider():
    assert DEVICE_PLUGIN.policy(DECIDER) is DECIDER.policy
    assert ALLOCATOR.policy(DECIDER) is DECIDER.dra_policy


def test_the_allocators_first_fit_is_judged_where_a_close_set_is_free():
    state = NodeState(seed_layout(), FREE)
    refused = DECIDER.decide(2, NodeView("n", state, picker=ALLOCATOR), Intent.REQUIRED)
    assert not refused.passes and refused.reason.startswith("the allocator would take GPU3+GPU4")
    planned = DECIDER.decide(2, NodeView("n", state, picker=DEVICE_PLUGIN), Intent.REQUIRED)
    assert planned.passes and planned.plan == (3, 4)
