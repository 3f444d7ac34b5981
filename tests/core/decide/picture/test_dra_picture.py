"""The DRA node picture (gpupair/decide/picture/dra_picture.py) against the reporter's, on recorded-shaped objects."""

from __future__ import annotations

import copy
from datetime import datetime, timezone

import pytest

from gpupair.kubewire import dra
from gpupair.decide.judge.decisions import Decider, NodeView
from gpupair.decide.picture.dra_picture import PictureError, allocation_of, build
from gpupair.decide.devices.pickers import ALLOCATOR
from gpupair.topology.report import decode_annotations, encode_annotations, PodHolding
from tests.dra_support import (
    DRIVER, allocated_claim, as_list_attributes, busy_claims, node_slice, recorded, recorded_claims,
)
from tests.layouts import seed_layout

AT = datetime(2026, 12, 1, 9, 32, tzinfo=timezone.utc)


def picture(slices, claims, topology=None, node="dra-node-1"):
    parsed = [dra.parse_slice(s) for s in slices]
    allocations = [a for a in (allocation_of(dra.parse_claim(c), DRIVER) for c in claims) if a is not None]
    return build(node, parsed, allocations, DRIVER, AT, topology)


def test_recorded_slice_and_claims_give_what_the_control_plane_allocated():
    claims = [c for c in recorded_claims()
              if c["status"]["allocation"]["devices"]["results"][0]["pool"] == "dra-node-1"]
    result = picture([recorded("resourceslice-dra-node-1.json")], claims)
    assert result.inferred
    assert result.report.state.free == frozenset()  # busy 0,1,2,5,6,7 and plain-1 on 3+4
    assert result.report.ledger.devices_of("dra-probe", "plain-1") == {3, 4}
    assert result.report.ledger.lists("dra-probe", "plain-1", "639cb084-0c34-4b42-9391-12a41e883968")
    assert not result.report.ledger.lists("dra-probe", "plain-1", "another-uid")
    layout = result.report.layout
    assert layout.numa_nodes == {0: (0, 1, 2, 3), 1: (4, 5, 6, 7)}
    assert layout.worst_link((3, 4)) == "SYS" and layout.worst_link((0, 1)) == "NODE"
    assert layout.devices[5].pci_bus_id == "00000000:A1:00.0" and layout.devices[5].pcie_root == "pci0000:A0"


@pytest.mark.parametrize("free", [{3, 4}, {2, 3, 4, 5}, {0, 1}, {4, 5, 6, 7}, set(), set(range(8))])
@pytest.mark.parametrize("with_reporter", [True, False])
def test_the_picture_equals_the_report_the_reporter_would_publish(free, with_reporter):
    node = "dra-node-2"
    layout = seed_layout(f"GPU-{node}")
    taken = set(range(8)) - free
    claims = busy_claims(node, taken)
    result = picture([node_slice(node)], claims, topology=layout if with_reporter else None, node=node)
    holders = [PodHolding("dra-probe", f"busy-{node}-{i}", frozenset({i})) for i in taken]
    reported = decode_annotations(encode_annotations(layout, frozenset(free), 1, AT, holders=holders))
    assert result.inferred is not with_reporter
    assert result.report.state.free == reported.state.free
    assert result.report.layout.numa_nodes == reported.layout.numa_nodes
    assert result.report.ledger.pods == reported.ledger.pods
    if with_reporter:
        assert result.report.layout == reported.layout  # the measured links, not inferred ones
    decider = Decider()
    for gpus in (1, 2, 4):
        ours = decider.decide(gpus, NodeView(node, result.report.state))
        theirs = decider.decide(gpus, NodeView(node, reported.state))
        assert (ours.passes, ours.reason, ours.plan, ours.score) == (theirs.passes, theirs.reason, theirs.plan,
                                                                     theirs.score)


def test_a_node_without_a_close_pair_is_refused_with_todays_reason():
    result = picture([node_slice("dra-node-1")], busy_claims("dra-node-1", {0, 1, 2, 5, 6, 7}))
    decision = Decider().decide(2, NodeView("dra-node-1", result.report.state))
    assert not decision.passes
    assert decision.reason == "need 2 GPUs on one NUMA node; free: NUMA0=1 NUMA1=1"


def test_inferred_links_follow_pcie_root_then_numa():
    obj = node_slice("n")
    for device in obj["spec"]["devices"][:2]:  # GPU0 and GPU1 behind one root complex
        device["attributes"]["resource.kubernetes.io/pcieRoot"]["string"] = "pci0000:20"
    layout = picture([obj], [], node="n").report.layout
    assert layout.link(0, 1) == "PHB" and layout.link(0, 2) == "NODE" and layout.link(0, 4) == "SYS"


def test_missing_numa_without_reporter_topology_is_no_picture():
    with pytest.raises(PictureError, match="no resource.kubernetes.io/numaNode attribute"):
        picture([node_slice("n", numa=False)], [], node="n")


def test_missing_numa_with_reporter_topology_uses_the_reporter():
    layout = seed_layout("GPU-n")
    result = picture([node_slice("n", numa=False)], [], topology=layout, node="n")
    assert result.report.layout == layout and not result.inferred


def test_reporter_topology_that_does_not_match_falls_back_to_inference_and_says_why():
    result = picture([node_slice("n")], [], topology=seed_layout("GPU-other"), node="n")
    # uuids differ but the seed's PCI ids match: matched by PCI id
    assert not result.inferred
    obj = node_slice("n")
    obj["spec"]["devices"][0]["attributes"]["resource.kubernetes.io/pciBusID"]["string"] = "0000:05:00.0"
    result = picture([obj], [], topology=seed_layout("GPU-other"), node="n")
    assert result.inferred and "n/gpu-0 matches no GPU" in result.note


def test_a_pool_of_two_slices_counts_only_when_both_are_in():
    first = node_slice("n", name="n-a", devices=range(4), slice_count=2)
    second = node_slice("n", name="n-b", devices=range(4, 8), slice_count=2)
    with pytest.raises(PictureError, match="incomplete: 1 of 2 ResourceSlices at generation 1"):
        picture([first], [], node="n")
    result = picture([first, second], busy_claims("n", {0}), node="n")
    assert result.report.state.free == frozenset(range(1, 8))


def test_only_the_newest_pool_generation_counts():
    old = node_slice("n", name="n-old", generation=1)
    new = node_slice("n", name="n-new", generation=2, devices=range(6))  # GPU6 and GPU7 gone
    result = picture([old, new], busy_claims("n", {7}), node="n")
    assert result.report.layout.size == 6
    assert result.report.state.free == frozenset(range(6))  # the claim on the vanished gpu-7 takes nothing
    assert result.report.generation == 2


def test_a_device_listed_twice_in_a_pool_is_refused():
    first = node_slice("n", name="n-a", slice_count=2, devices=range(4))
    second = node_slice("n", name="n-b", slice_count=2, devices=range(3, 8))
    with pytest.raises(PictureError, match="lists device gpu-3 twice"):
        picture([first, second], [], node="n")


def test_tainted_devices_are_unhealthy_and_never_free():
    obj = node_slice("n")
    obj["spec"]["devices"][2]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    obj["spec"]["devices"][3]["taints"] = [{"key": "gpu.nvidia.com/note", "effect": "None"}]
    result = picture([obj], [], node="n")
    assert result.report.unhealthy == {2}
    assert 2 not in result.report.state.free and 3 in result.report.state.free


def test_a_claim_allocated_but_not_reserved_takes_its_devices_and_lists_no_pod():
    claim = allocated_claim("team", "early", "n", [0, 1], pod=None)
    result = picture([node_slice("n")], [claim], node="n")
    assert result.report.state.free == frozenset(range(2, 8))
    assert result.report.ledger.pods == {}


def test_other_drivers_and_non_gpu_devices_are_left_out():
    nic = node_slice("n", name="n-nic", driver="rdma.example.com")
    mig = node_slice("n")
    mig["spec"]["devices"][7]["attributes"]["type"]["string"] = "mig"
    result = picture([mig, nic], [allocated_claim("t", "c", "n", [0], driver="rdma.example.com")], node="n")
    assert result.report.layout.size == 7 and result.report.state.free == frozenset(range(7))


def test_shared_claim_lists_every_pod_it_is_reserved_for():
    claim = allocated_claim("t", "shared", "n", [4, 5], pod="a")
    claim["status"]["reservedFor"].append({"name": "b", "resource": "pods", "uid": "uid-b"})
    ledger = picture([node_slice("n")], [claim], node="n").report.ledger
    assert ledger.devices_of("t", "a") == ledger.devices_of("t", "b") == {4, 5}


@pytest.mark.parametrize("bad", [
    {"spec": {"driver": DRIVER, "pool": {"name": "p"}, "devices": [{"name": 3}]}},
    {"spec": {"driver": DRIVER, "pool": "p"}},
    {"metadata": {"name": "x"}, "spec": {"driver": DRIVER, "pool": {"name": "p", "generation": "1"}}},
    [],
])
def test_a_slice_that_does_not_fit_its_type_is_rejected_with_where(bad):
    with pytest.raises(dra.DRAWireError):
        dra.parse_slice(bad)


ALL_ATTRIBUTES = ("index", "uuid", "type", dra.NUMA_ATTRIBUTE, dra.PCIE_ROOT_ATTRIBUTE, dra.PCI_BUS_ID_ATTRIBUTE)


@pytest.mark.parametrize("names", [(dra.NUMA_ATTRIBUTE,), ALL_ATTRIBUTES])
def test_list_form_attributes_of_one_value_read_as_that_value(names):
    claims = busy_claims("n", {0, 1, 2, 5, 6, 7})
    scalar = picture([node_slice("n")], claims, node="n")
    listed = picture([as_list_attributes(node_slice("n"), names)], claims, node="n")
    assert listed.report.layout == scalar.report.layout
    assert listed.report.layout.numa_nodes == {0: (0, 1, 2, 3), 1: (4, 5, 6, 7)}
    assert listed.report.state.free == scalar.report.state.free == {3, 4}


@pytest.mark.parametrize("values", [[], [0, 1]])
def test_a_numa_list_of_none_or_several_nodes_is_an_unknown_socket(values):
    obj = node_slice("n")
    obj["spec"]["devices"][2]["attributes"][dra.NUMA_ATTRIBUTE] = {"ints": values}
    with pytest.raises(PictureError, match="n/gpu-2 has no resource.kubernetes.io/numaNode"):
        picture([obj], [], node="n")
    layout = seed_layout("GPU-n")  # the reporter's NVML topology still places it
    assert picture([obj], [], topology=layout, node="n").report.layout == layout


@pytest.mark.parametrize("attribute", [{"ints": ["0"]}, {"ints": [True]}, {"ints": 0}, {"strings": [1]}])
def test_a_list_attribute_of_the_wrong_type_rejects_the_slice(attribute):
    obj = node_slice("n")
    obj["spec"]["devices"][0]["attributes"][dra.NUMA_ATTRIBUTE] = attribute
    with pytest.raises(dra.DRAWireError, match="numaNode"):
        dra.parse_slice(obj)


def test_unknown_fields_from_a_newer_apiserver_are_ignored():
    obj = node_slice("n")
    obj["spec"]["futureField"] = {"x": 1}
    obj["spec"]["devices"][0]["bindsToNode"] = True
    assert dra.parse_slice(obj).spec.devices[0].name == "gpu-0"


@pytest.mark.parametrize("intent, passes, score", [("required", False, 0), ("preferred", True, 0), ("none", True, 0)])
def test_a_dra_node_whose_first_fit_is_not_close_is_judged_by_the_allocators_pick(intent, passes, score):
    from gpupair.decide.pod.intent import Intent

    result = picture([node_slice("n")], busy_claims("n", {0, 1, 2}), node="n")  # free GPU3 | GPU4..7
    decision = Decider().decide(2, NodeView("n", result.report.state, picker=ALLOCATOR), Intent(intent))
    plugin = Decider().decide(2, NodeView("n", result.report.state), Intent(intent))
    assert (decision.passes, decision.score) == (passes, score)
    if passes:
        assert decision.plan == (3, 4)  # what the allocator takes, whatever gpupair would like
    else:
        assert decision.reason == "the allocator would take GPU3+GPU4 (SYS); free: NUMA0=1 NUMA1=4"
    assert plugin.passes and plugin.plan != (3, 4)  # a device plugin node: the aligned plugin's pick


def test_a_dra_node_whose_first_fit_is_close_scores_that_pick():
    from gpupair.decide.devices import placement

    state = picture([node_slice("n")], busy_claims("n", {0, 1}), node="n").report.state
    decision = Decider().decide(2, NodeView("n", state, picker=ALLOCATOR))
    assert decision.passes and decision.plan == (2, 3)
    assert decision.score == placement.score(state, (2, 3))


def test_claim_demand_counts_gpu_requests_and_names_the_allocators_policy():
    from gpupair.decide.picture.dra_picture import Demand, claim_demand

    classes = frozenset({DRIVER})
    claims = {c["metadata"]["name"].split("-")[0]: dra.parse_claim(c) for c in recorded_claims()}
    assert claim_demand(claims["numa"], classes) == Demand(2, "dra-first-fit-numa", ("resource.kubernetes.io/numaNode",))
    assert claim_demand(claims["plain"], classes) == Demand(2, "dra-first-fit")
    assert claim_demand(claims["plain"], frozenset({"other.example.com"})).gpus == 0
    rewritten = recorded_claims()[-1]  # the webhook's preferred rewrite of a 2-GPU request
    rewritten["spec"]["devices"] = {
        "requests": [{"name": "gpus", "firstAvailable": [
            {"name": "numa", "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 2},
            {"name": "any", "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 2}]}],
        "constraints": [{"matchAttribute": dra.NUMA_ATTRIBUTE, "requests": ["gpus/numa"]}]}
    assert claim_demand(dra.parse_claim(rewritten), classes) == Demand(2, "dra-first-available")


def test_first_available_takes_the_close_set_where_one_is_free_and_any_set_otherwise():
    from gpupair.decide.devices.policies import POLICIES

    layout = seed_layout()
    assert POLICIES["dra-first-available"].pick(layout, frozenset({3, 4, 5}), 2) == (4, 5)
    assert POLICIES["dra-first-available"].pick(layout, frozenset({3, 4}), 2) == (3, 4)


def test_partitionable_gpus_and_attributes_gpupair_does_not_read_change_nothing():
    """NVIDIA's driver with partitionable devices (KEP-4815; cmd/gpu-kubelet-plugin/partitions.go):
    the slice declares a counter set per GPU, each full GPU consumes it, MIG partitions (type
    mig) consume from it too, and attributes come and go by version and gate. gpupair reads the
    GPUs (type gpu) and the standard attributes it knows; nothing else is required."""
    claims = busy_claims("n", {0, 1, 2, 5, 6, 7})
    plain = picture([node_slice("n")], claims, node="n")
    obj = node_slice("n")
    obj["spec"]["sharedCounters"] = [{"name": f"gpu-{i}-counter-set", "counters": {"memory": {"value": "48Gi"}}}
                                     for i in range(8)]
    for i, device in enumerate(obj["spec"]["devices"]):
        device["consumesCounters"] = [{"counterSet": f"gpu-{i}-counter-set", "counters": {"memory": {"value": "48Gi"}}}]
        device["attributes"]["addressingMode"] = {"string": "HMM"}
        device["attributes"][f"partition{i // 2}"] = {"bool": True}  # an attribute of a gate gpupair does not read
    mig = copy.deepcopy(obj["spec"]["devices"][7])
    mig["name"], mig["attributes"]["type"] = "gpu-7-mig-19-0-1", {"string": "mig"}
    obj["spec"]["devices"].append(mig)
    partitioned = picture([obj], claims, node="n")
    assert partitioned.report.layout == plain.report.layout and partitioned.report.state == plain.report.state


def test_the_nodes_product_is_the_productname_nvidias_driver_publishes():
    published = node_slice("n")
    for device in published["spec"]["devices"]:  # gpu.nvidia.com's attribute, NVML's name (deviceinfo.go)
        device["attributes"]["productName"] = {"string": "NVIDIA H100 80GB HBM3"}
    assert picture([published], [], node="n").report.product == "NVIDIA H100 80GB HBM3"
    assert picture([node_slice("n")], [], node="n").report.product == ""  # the recorded slice has none
    published["spec"]["devices"][0]["attributes"]["productName"] = {"string": "NVIDIA H200"}
    assert picture([published], [], node="n").report.product == ""  # mixed: none


def test_a_claims_product_selector_is_what_its_gpus_accept():
    from gpupair.decide.picture.dra_picture import claim_demand

    claim = recorded_claims()[0]
    claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'}}]
    demand = claim_demand(dra.parse_claim(claim), frozenset({DRIVER}), DRIVER)
    assert demand.accepts.among(["NVIDIA-H200"]) == ("NVIDIA-H100-80GB-HBM3",) and demand.note == ""
    claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].productName.matches("H1.*")'}}]
    demand = claim_demand(dra.parse_claim(claim), frozenset({DRIVER}), DRIVER)
    assert demand.accepts.among(["NVIDIA-H200"]) == () and "counted as any product" in demand.note
