"""Placement for pods that ask for the network (gpupair.io/nic, RDMA resources), over real HTTP,
on a lopsided board: one NIC at PIX to GPU0-3, SYS to GPU4-7 (the shape of the RTX 4090 box the
network issue describes), and on the recorded 8x4090 box whose only NIC path is PHB to GPU6."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupair.topology import nics
from gpupair.topology.layout import NodeLayout
from gpupair.decide.pod.nic_ask import NIC_ASK_KEY, NIC_LEVEL_KEY
from gpupair.topology.report import TOPOLOGY_KEY, encode_annotations, fingerprint
from gpupair.topology.smi_topo import parse_topo_matrix
from tests.extender_support import NOW, args_body, host_scores, make_extender, node_object, pod_object, serving
from tests.layouts import seed_layout

TOPO = Path(__file__).resolve().parents[1] / "fixtures" / "topo"
LOPSIDED = nics.NicLayout(nics=(nics.Nic("mlx5_bond_0", "00000000:25:00.0", 0, "pci0000:20"),),
                          links=tuple((("PIX",) if g < 4 else ("SYS",)) for g in range(8)))


def annotated(layout: NodeLayout, free: set[int], nic_layout: nics.NicLayout | None) -> dict[str, str]:
    annotations = encode_annotations(layout, frozenset(free), 1, NOW)
    if nic_layout is not None:
        annotations[nics.NICS_KEY] = nics.encode_nics(nic_layout, fingerprint(annotations[TOPOLOGY_KEY]))
    return annotations


def asking(ask: str | None = "required", level: str | None = None, rdma: bool = False) -> dict:
    pod = pod_object(2)
    notes = pod["metadata"].setdefault("annotations", {})
    if ask is not None:
        notes[NIC_ASK_KEY] = ask
    if level is not None:
        notes[NIC_LEVEL_KEY] = level
    if rdma:
        resources = pod["spec"]["containers"][0]["resources"]
        resources["limits"]["rdma/hca_shared_devices_a"] = "1"
        resources["requests"]["rdma/hca_shared_devices_a"] = "1"
    return pod


async def filter_and_score(pod: dict, nodes: list[dict]) -> tuple[dict, dict]:
    extender = make_extender()
    async with serving(extender) as client:
        _, filtered = await client.post("filter", args_body(pod, nodes=nodes))
        _, scores = await client.post("prioritize", args_body(pod, nodes=nodes))
        return filtered, host_scores(scores, [node["metadata"]["name"] for node in nodes])


async def test_a_pod_asking_for_the_network_is_placed_only_where_a_close_pair_is_near_the_nic():
    layout = seed_layout("GPU-lop")
    nodes = [node_object("near", annotated(layout, {0, 1, 4, 5}, LOPSIDED)),
             node_object("far", annotated(layout, {2, 4, 5, 6, 7}, LOPSIDED)),
             node_object("old", annotated(layout, set(range(8)), None))]
    filtered, _ = await filter_and_score(asking(), nodes)
    plain, _ = await filter_and_score(asking(None), nodes)
    assert [n["metadata"]["name"] for n in filtered["Nodes"]["items"]] == ["near"]
    assert filtered["FailedNodes"] == {
        "far": "need 2 GPUs on one NUMA node with a NIC at PXB or closer; free near mlx5_bond_0: 1",
        "old": "the pod asks for a NIC at PXB or closer; this node's reporter publishes no NICs "
               "(gpupair.io/nics missing)",
    }
    assert len(plain["Nodes"]["items"]) == 3  # without the ask, every node has a close pair


async def test_a_node_where_the_plugins_pick_is_not_near_the_nic_is_refused_with_that_pick():
    # The NIC hangs off the second socket. The best-effort plugin takes GPU0+GPU1 from free
    # {0,1,4,5}, as good a pair as GPU4+GPU5 by its scores: the pod would not get GPUDirect RDMA.
    layout = seed_layout("GPU-rev")
    reverse = nics.NicLayout(nics=LOPSIDED.nics, links=tuple((("SYS",) if g < 4 else ("PIX",)) for g in range(8)))
    nodes = [node_object("rev", annotated(layout, {0, 1, 4, 5}, reverse)),
             node_object("only", annotated(layout, {4, 5}, reverse))]
    filtered, _ = await filter_and_score(asking(), nodes)
    assert filtered["FailedNodes"] == {
        "rev": "the device plugin would take GPU0+GPU1, not all near a NIC at PXB; free near mlx5_bond_0: 2"}
    assert [n["metadata"]["name"] for n in filtered["Nodes"]["items"]] == ["only"]


async def test_preferred_passes_everywhere_and_scores_the_near_node_higher():
    layout = seed_layout("GPU-lop")
    nodes = [node_object("near", annotated(layout, {0, 1, 4, 5}, LOPSIDED)),
             node_object("far", annotated(layout, {2, 4, 5, 6, 7}, LOPSIDED))]
    filtered, scores = await filter_and_score(asking("preferred"), nodes)
    assert len(filtered["Nodes"]["items"]) == 2
    assert scores["far"] == 0 < scores["near"]


async def test_requesting_an_rdma_resource_asks_for_the_network_and_the_level_can_be_set():
    layout = seed_layout("GPU-lop")
    phb_only = nics.NicLayout(nics=LOPSIDED.nics, links=tuple((("PHB",) if g < 4 else ("SYS",)) for g in range(8)))
    nodes = [node_object("phb", annotated(layout, {0, 1}, phb_only))]
    rdma, _ = await filter_and_score(asking(None, rdma=True), nodes)
    relaxed, _ = await filter_and_score(asking("required", level="PHB"), nodes)
    assert rdma["FailedNodes"]["phb"].startswith("need 2 GPUs on one NUMA node with a NIC at PXB or closer")
    assert [n["metadata"]["name"] for n in relaxed["Nodes"]["items"]] == ["phb"]


@pytest.mark.parametrize("level, reason", [
    ("PXB", "free near NIC0: 0, NIC1: 0"),
    ("PHB", "free near NIC0: 1, NIC1: 0"),  # only GPU6 is near either NIC, and NIC0 comes first
])
async def test_the_recorded_8x4090_box_has_no_pair_near_its_nics(level, reason):
    topo = parse_topo_matrix((TOPO / "go-gpuallocator-17-8x4090-sys.txt").read_text())
    nodes = [node_object("box", annotated(topo.to_layout(), set(range(8)), topo.to_nic_layout()))]
    filtered, _ = await filter_and_score(asking("required", level=level), nodes)
    assert filtered["FailedNodes"]["box"].endswith(reason)


def test_the_verdict_names_the_bonded_nic_at_pix():
    from gpupair.decide.judge import verdict

    result = verdict.classify(seed_layout(), (0, 1), nics=LOPSIDED)
    assert result.annotations()[verdict.GRANTED_NIC_KEY] == "GPU0:mlx5_bond_0=PIX GPU1:mlx5_bond_0=PIX"
    assert result.annotations()[verdict.NIC_LINK_KEY] == "PIX"


async def test_on_a_dra_node_the_reporters_nics_join_the_picture_from_the_slices():
    from tests.dra_support import DRIVER, busy_claims, node_slice

    layout = seed_layout("GPU-dra-lop")
    notes = annotated(layout, set(), LOPSIDED)
    topology_only = {TOPOLOGY_KEY: notes[TOPOLOGY_KEY], nics.NICS_KEY: notes[nics.NICS_KEY]}
    extender = make_extender(dra_driver=DRIVER)
    extender.dra.slices.replace([node_slice("dra-lop"), node_slice("dra-far")])
    extender.dra.claims.replace(busy_claims("dra-lop", {2, 3, 6, 7}) + busy_claims("dra-far", {0, 1, 2, 3}))
    nodes = [node_object("dra-lop", topology_only), node_object("dra-far", {
        TOPOLOGY_KEY: annotated(seed_layout("GPU-dra-far"), set(), None)[TOPOLOGY_KEY],
        nics.NICS_KEY: annotated(seed_layout("GPU-dra-far"), set(), LOPSIDED)[nics.NICS_KEY]})]
    async with serving(extender) as client:
        _, filtered = await client.post("filter", args_body(asking(), nodes=nodes))
    assert [n["metadata"]["name"] for n in filtered["Nodes"]["items"]] == ["dra-lop"]
    assert filtered["FailedNodes"]["dra-far"].endswith("free near mlx5_bond_0: 0")


@pytest.mark.parametrize("listed", [False, True], ids=["scalar", "list"])
async def test_nics_an_rdma_dra_driver_publishes_are_judged_by_their_attributes(listed):
    from tests.dra_support import DRIVER, as_list_attributes, node_slice

    gpus = node_slice("dra-net")
    rdma = node_slice("dra-net", name="dra-net-rdma", pool="dra-net-rdma", driver="rdma.example.com",
                      devices=[0, 4])
    for device, name in zip(rdma["spec"]["devices"], ("mlx5-0", "mlx5-1")):
        device["name"] = name
        device["attributes"] = {key: device["attributes"][key] for key in
                                ("resource.kubernetes.io/numaNode", "resource.kubernetes.io/pcieRoot")}
    if listed:  # DRAListTypeAttributes (KEP-5491): each attribute a list of its one value
        for obj in (gpus, rdma):
            as_list_attributes(obj, ("resource.kubernetes.io/numaNode", "resource.kubernetes.io/pcieRoot"))
        assert rdma["spec"]["devices"][1]["attributes"]["resource.kubernetes.io/numaNode"] == {"ints": [1]}
    # mlx5-0 shares GPU0's root complex (PHB), mlx5-1 GPU4's
    extender = make_extender(dra_driver=DRIVER, dra_nic_drivers=frozenset({"rdma.example.com"}))
    extender.dra.slices.replace([gpus, rdma])
    extender.dra.claims.replace([])
    nics_of = extender.dra.entry("dra-net", None).report.nics
    assert [n.name for n in nics_of.nics] == ["mlx5-0", "mlx5-1"]
    assert nics_of.links[0] == ("PHB", "SYS") and nics_of.links[1] == ("NODE", "SYS") and nics_of.links[4][1] == "PHB"
    async with serving(extender) as client:
        _, at_pxb = await client.post("filter", args_body(asking(), nodes=[node_object("dra-net")]))
        _, at_phb = await client.post("filter", args_body(asking(level="PHB"), nodes=[node_object("dra-net")]))
    # inferred links never claim a shared switch: at PXB no GPU qualifies; at PHB only GPU0 and GPU4 do
    assert at_pxb["FailedNodes"]["dra-net"].endswith("free near mlx5-0: 0, mlx5-1: 0")
    assert at_phb["FailedNodes"]["dra-net"].endswith("free near mlx5-0: 1, mlx5-1: 1")
