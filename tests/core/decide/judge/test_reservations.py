"""Reservations alone: how each kind of hold starts and ends."""

from __future__ import annotations

from gpupair.decide.judge.decisions import Decider, NodeView
from gpupair.decide.judge.reservations import Hold, Reservation, Reservations
from gpupair.simulator.shapes import seed_layout
from gpupair.topology.layout import NodeState
from gpupair.topology.report import Ledger

ALL = frozenset(range(8))


class Timer:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def ledger(**pods: set[int]) -> Ledger:
    return Ledger({("ml", name): frozenset(d) for name, d in pods.items()}, {})


def store(outcomes=None, ttl=120.0):
    timer = Timer()
    res = Reservations(ttl=ttl, timer=timer, on_outcome=(outcomes.append if outcomes is not None else lambda o: None))
    return res, timer


def test_a_plan_ends_confirmed_when_listed_with_its_devices_and_deviated_with_others():
    outcomes = []
    res, _ = store(outcomes)
    res.reserve(Reservation("u1", "n", frozenset({0, 1}), "ml", "a"))
    res.reserve(Reservation("u2", "n", frozenset({4, 5}), "ml", "b"))
    assert res.hold("n") == Hold(frozenset({0, 1, 4, 5}))
    res.observe_report("n", ALL - {0, 1, 6, 7}, ledger(a={0, 1}, b={6, 7}))
    assert not res.hold("n") and sorted(outcomes) == ["confirmed", "deviated"]


def test_a_plan_for_a_pod_the_latest_ledger_lists_already_holds_nothing():
    # A DRA node: the claim watch showed the pod's allocation before the bind that plans it.
    outcomes = []
    res, timer = store(outcomes)
    res.observe_report("n", ALL - {6, 7}, ledger(a={6, 7}))
    assert res.reserve(Reservation("u1", "n", frozenset({6, 7}), "ml", "a")) is False
    assert res.reserve(Reservation("u2", "n", frozenset({0}), "ml", "a")) is False  # planned GPU0, holds gpu-7
    assert not res.hold("n") and len(res) == 0
    assert outcomes == ["confirmed", "deviated"]
    timer.now += 119  # nothing left to end when the TTL runs out
    assert outcomes == ["confirmed", "deviated"] and not res.hold("n")
    assert res.reserve(Reservation("u3", "n", frozenset({0, 1}), "ml", "b")) is True  # a pod not listed
    assert res.hold("n") == Hold(frozenset({0, 1}))


def test_a_plan_overtaken_by_another_pod_is_held_by_count_until_listed():
    res, _ = store()
    res.reserve(Reservation("u1", "n", frozenset({0, 1}), "ml", "a"))
    res.observe_report("n", ALL - {1}, ledger(pinned={1}))  # GPU1 went to a pod bound elsewhere
    assert res.hold("n") == Hold(count=2)
    res.observe_report("n", ALL - {1, 2, 3}, ledger(pinned={1}, a={2, 3}))
    assert not res.hold("n")


def test_pods_bound_elsewhere_hold_a_count_and_the_pod_itself_is_excluded():
    res, _ = store()
    res.observe_report("n", ALL, ledger())
    res.pod_bound("u1", "n", "ml", "a", 2)
    res.pod_bound("u2", "n", "ml", "b", 1)
    res.pod_bound("u2", "n", "ml", "b", 1)  # watch events repeat
    assert res.hold("n") == Hold(count=3)
    assert res.hold("n", exclude="u1") == Hold(count=1)
    assert res.by_node() == {"n": Hold(count=3)}


def test_a_pod_the_ledger_already_lists_holds_nothing():
    res, _ = store()
    res.observe_report("n", ALL - {3}, ledger(a={3}))
    res.pod_bound("u1", "n", "ml", "a", 1)
    assert not res.hold("n") and len(res) == 0


def test_a_uid_mismatch_is_a_different_pod():
    res, _ = store()
    res.observe_report("n", ALL - {3}, Ledger({("ml", "a"): frozenset({3})}, {("ml", "a"): "old-uid"}))
    res.pod_bound("new-uid", "n", "ml", "a", 1)
    assert res.hold("n") == Hold(count=1)


def test_ttl_expires_holds_of_pods_that_never_show_up():
    outcomes = []
    res, timer = store(outcomes, ttl=10.0)
    res.observe_report("n", ALL, ledger())
    res.reserve(Reservation("u1", "n", frozenset({0, 1}), "ml", "a"))
    res.pod_bound("u2", "n", "ml", "b", 1)
    timer.now = 11.0
    assert not res.hold("n") and sorted(outcomes) == ["expired", "expired"]


def test_delete_releases_plans_and_counts():
    outcomes = []
    res, _ = store(outcomes)
    res.observe_report("n", ALL, ledger())
    res.reserve(Reservation("u1", "n", frozenset({0, 1}), "ml", "a"))
    res.pod_bound("u1", "n", "ml", "a", 2)
    res.pod_bound("u2", "n", "ml", "b", 1)
    assert res.pod_gone("u1", "deleted") and res.pod_gone("u2", "finished")
    assert not res.pod_gone("u3", "deleted")
    assert not res.hold("n") and outcomes == ["released", "released"]


def test_without_a_ledger_plans_end_when_shown_taken_and_others_are_not_held():
    outcomes = []
    res, _ = store(outcomes)
    res.pod_bound("u2", "n", "ml", "b", 1)  # before the node's first report: held
    assert res.hold("n") == Hold(count=1)
    res.reserve(Reservation("u1", "n", frozenset({0, 1}), "ml", "a"))
    res.observe_report("n", ALL - {7}, None)  # a reporter older than the ledger
    assert res.hold("n") == Hold(frozenset({0, 1}))
    res.pod_bound("u3", "n", "ml", "c", 1)
    res.observe_report("n", ALL - {0, 1, 7}, None)
    assert not res.hold("n") and outcomes == ["confirmed"]


def test_node_gone_drops_everything_there():
    res, _ = store()
    res.observe_report("n", ALL, ledger())
    res.reserve(Reservation("u1", "n", frozenset({0, 1}), "ml", "a"))
    res.pod_bound("u2", "n", "ml", "b", 1)
    res.node_gone("n")
    assert not res.by_node() and len(res) == 0


def test_a_full_store_evicts_its_oldest_plan_and_the_node_stops_owing_it():
    res = Reservations(maxsize=2, timer=Timer())
    changed = []
    res.subscribe(changed.append)
    res.reserve(Reservation("u1", "n1", frozenset({0}), "ml", "a"))
    res.reserve(Reservation("u2", "n2", frozenset({1}), "ml", "b"))
    assert res.by_node() == {"n1": Hold(frozenset({0})), "n2": Hold(frozenset({1}))}
    changed.clear()
    res.reserve(Reservation("u3", "n2", frozenset({2}), "ml", "c"))
    assert "n1" in changed  # readers of n1's hold are told, not left with the evicted plan
    assert res.by_node() == {"n2": Hold(frozenset({1, 2}))} and not res.hold("n1")
    # The evicted pod planned again elsewhere is owed there alone.
    res.reserve(Reservation("u1", "n2", frozenset({3}), "ml", "a"))
    assert not res.hold("n1") and res.hold("n2") == Hold(frozenset({2, 3}))


def test_a_held_set_holds_its_devices_from_all_but_its_key_until_its_time_runs_out():
    res, timer = store()
    res.hold_set("defrag:w", "n", frozenset({0, 1}), 60)
    res.pod_bound("u1", "n", "ml", "a", 1)
    kept = frozenset({0, 1})
    assert res.hold("n") == Hold(kept, count=1, kept=kept)
    assert res.hold("n", exclude={"defrag:w", "w"}) == Hold(count=1)
    assert res.hold("n", exclude="u1") == Hold(kept, kept=kept)
    res.observe_report("n", ALL - {0, 1}, ledger(moved={0, 1}))  # its devices shown taken: still held, no count
    assert res.by_node() == {"n": Hold(kept, count=1, kept=kept)} and "defrag:w" not in res.known_uids()
    timer.now += 60
    assert res.by_node() == {"n": Hold(count=1)} and not res.held_sets()


def test_a_plan_beside_a_count_counts_too_so_the_next_pod_fits_whatever_either_took():
    # The burst on the real plane (tests/controlplane/test_device_plugin.py): a report caught two
    # of four pinned pods (GPUs 0, 1), the other two hold by count, and the extender planned
    # {2, 3} for a 2-GPU pod. The pinned pods really took 2 and 4, so the plugin gave that pod
    # {6, 7}, and {3, 5}, a SYS pair, was all that was left for the next.
    res, _ = store()
    res.observe_report("n", ALL - {0, 1}, ledger(p0={0}, p1={1}))
    res.pod_bound("u2", "n", "ml", "p2", 1)
    res.pod_bound("u4", "n", "ml", "p4", 1)
    res.reserve(Reservation("b1", "n", frozenset({2, 3}), "ml", "burst-1"))
    hold = res.hold("n")
    assert hold == Hold(frozenset({2, 3}), count=2)  # owed as it is: the plan, and two unknown
    view = NodeView("n", NodeState(seed_layout(), ALL - {0, 1}), "", hold.devices, hold.count)
    assert not Decider().decide(2, view).passes
    res.observe_report("n", ALL - {0, 1, 2, 4, 6, 7}, ledger(p0={0}, p1={1}, p2={2}, p4={4}, **{"burst-1": {6, 7}}))
    assert not res.hold("n")  # the report lists them all: nothing owed
