"""A pod asking a MIG profile (``nvidia.com/mig-3g.20gb``, the device plugin's mixed strategy),
through the extender's verbs over real loopback HTTP: it asks no whole GPU, so the filter passes
a node whose GPUs are all partly taken; the fragmentation score grades it on the GPU its slices
would land on, 3 of the GPU's 7 (gpupair/decide/pod/mig_ask.py), on nodes whose reporters
publish each GPU's slices taken (gpupair.io/shares)."""

from __future__ import annotations

import pytest

from gpupair.decide.score.gpu_products import PRODUCT_LABEL
from gpupair.topology import report
from gpupair.topology.shares import SHARES_KEY, GpuShares, encode_shares
from tests.extender_support import args_body, host_scores, make_extender, node_object, pod_object, \
    report_annotations, serving

# Slices taken per GPU of 8, each GPU of 7 slices: "partly" has a GPU with 4 left, which holds a
# 3g; "tight" one with 2 left and one full, so it has the least GPU left but no room for a 3g
# on a GPU already used; "free" none taken; "all-partly" one slice taken on every GPU.
NODES = {"partly": {0: 3}, "tight": {0: 5, 1: 7}, "free": {}, "all-partly": dict.fromkeys(range(8), 1)}
SLICES = 7


def mig_node(name: str, taken: dict[int, int]) -> dict:
    annotations = report_annotations(set(range(8)) - set(taken), node=name)
    fingerprint = report.fingerprint(annotations[report.TOPOLOGY_KEY])
    shares = GpuShares((SLICES,) * 8, tuple(taken.get(gpu, 0) for gpu in range(8)))
    annotations[SHARES_KEY] = encode_shares(shares, fingerprint, 1)
    node = node_object(name, annotations)
    node["metadata"]["labels"][PRODUCT_LABEL] = "A100"
    node["status"]["allocatable"]["cpu"] = "64"
    return node


def mig_pod(name: str, profile: str = "nvidia.com/mig-3g.20gb", node: str = "", count: int = 1) -> dict:
    pod = pod_object(0, name=name, uid=f"uid-{name}", namespace="ml")
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}, "limits": {profile: str(count)}}
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def extender_with_mig(cached: bool):
    extender = make_extender(fragmentation=True, node_cache=cached)
    nodes = [mig_node(name, taken) for name, taken in NODES.items()]
    usage = extender.score.usage
    if cached:
        extender.node_cache.replace(nodes)
    else:
        for node in nodes:
            usage.node_seen(node["metadata"]["name"], node)
    # The workload: the MIG pods there, and pairs of whole GPUs waiting.
    for node, taken in NODES.items():
        for gpu, slices in taken.items():
            usage.pod_seen(mig_pod(f"{node}-{gpu}", f"nvidia.com/mig-{slices}g.{5 * slices}gb", node))
    for number in range(6):
        usage.pod_seen(pod_object(2, name=f"pair-{number}", uid=f"uid-pair-{number}", namespace="ml"))
    return extender, nodes


def body(pod: dict, nodes: list[dict], cached: bool) -> dict:
    return args_body(pod, names=list(NODES)) if cached else args_body(pod, nodes=nodes)


@pytest.mark.parametrize("cached", [False, True], ids=["nodes", "node-names"])
async def test_a_mig_profile_pod_passes_nodes_whose_gpus_are_all_partly_taken(cached):
    """all-partly has no GPU free: a pod asking two whole GPUs fails there, two 3g devices do not."""
    extender, nodes = extender_with_mig(cached)
    async with serving(extender) as client:
        status, filtered = await client.post("filter", body(mig_pod("asking", count=2), nodes, cached))
    assert status == 200 and filtered["Error"] == "", filtered
    passed = filtered["NodeNames"] if cached else [node["metadata"]["name"] for node in filtered["Nodes"]["items"]]
    assert passed == list(NODES), filtered


@pytest.mark.parametrize("cached", [False, True], ids=["nodes", "node-names"])
async def test_a_mig_profile_pod_is_graded_on_the_gpu_its_slices_would_share(cached):
    """On partly the 3g goes onto GPU0's 4 slices left; on tight (2 left) and free it breaks a
    whole GPU. Graded as a pod taking nothing, the packing tie-break would put tight, the
    fullest, first; sized as a whole GPU or in the wrong slices, partly's GPU0 would not hold it."""
    extender, nodes = extender_with_mig(cached)
    offered = ["partly", "tight", "free"]
    pod = mig_pod("asking")
    request = args_body(pod, names=offered) if cached else args_body(pod, nodes=nodes[:3])
    async with serving(extender) as client:
        status, graded = await client.post("prioritize-every-pod", request)
    assert status == 200, graded
    scores = host_scores(graded, offered)
    assert scores["partly"] == 10 and scores["tight"] < 10 and scores["free"] < 10, scores
