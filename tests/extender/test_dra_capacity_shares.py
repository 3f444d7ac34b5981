"""A pod whose DRA claim asks a share of a GPU's memory (``capacity.requests``, KEP-5075), through
the extender's verbs over real loopback HTTP: the filter does not ask it for a whole GPU, so a
node whose GPUs are all partly consumed but have room passes; the fragmentation score grades it
on the GPU it would share, sized on each node's capacity (gpupair/decide/picture/dra_capacity.py)."""

from __future__ import annotations

from gpupair.decide.score.gpu_products import PRODUCT_LABEL
from tests.controlplane.dra import claim_pod, pinned_claim
from tests.dra_support import DRIVER, share_claim, shared_slice
from tests.extender.test_extender_dra import dra_node
from tests.extender_support import args_body, graded_alike, host_scores, make_extender, serving
from tests.kube_double import make_pod

NODES = {"share-full": dict.fromkeys(range(8), "8Gi"), "share-one": {0: "8Gi"}, "free": {}}


def share_pod(name: str, claim: str, node: str = "") -> dict:
    pod = claim_pod("ml", name, claim=claim)
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1"}
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def asked_claim(name: str, count: int) -> dict:
    """``count`` shares of 8Gi, on as many GPUs of any (the allocator's next device for a
    request is past the one it took last)."""
    claim = pinned_claim("ml", name, 0, memory="8Gi")
    request = claim["spec"]["devices"]["requests"][0]["exactly"]
    request.pop("selectors")
    request["count"] = count
    return claim


def extender_with_shares():
    extender = make_extender(fragmentation=True, node_cache=True, dra_driver=DRIVER)
    extender.dra.slices.replace([shared_slice(node) for node in NODES])
    residents = [share_claim("ml", f"{node}-{gpu}", node, {gpu: memory})
                 for node, taken in NODES.items() for gpu, memory in taken.items()]
    extender.dra.claims.replace([*residents, asked_claim("one", 1), asked_claim("two", 2)])
    nodes = [dra_node(name) for name in NODES]
    for node in nodes:
        node["metadata"]["labels"][PRODUCT_LABEL] = "A100"
        node["status"]["allocatable"]["cpu"] = "64"
    extender.node_cache.replace(nodes)
    for claim in residents:  # the workload: the share pods there, and pairs waiting
        name = claim["metadata"]["name"]
        extender.score.usage.pod_seen(share_pod(name, name, name.rsplit("-", 1)[0]))
    for number in range(len(residents)):
        pair = make_pod(f"pair-{number}", "ml", gpus=2)
        pair["metadata"]["uid"] = f"uid-pair-{number}"
        extender.score.usage.pod_seen(pair)
    return extender


async def test_a_two_share_claim_passes_nodes_whose_gpus_are_all_partly_consumed():
    """Asked as two whole GPUs, share-full (no GPU free) would fail: need 2 GPUs on one NUMA node."""
    extender = extender_with_shares()
    pod = share_pod("asking", "two")
    async with serving(extender) as client:
        status, filtered = await client.post("filter", args_body(pod, names=list(NODES)))
    assert status == 200, filtered
    assert filtered["NodeNames"] == list(NODES), filtered


async def test_a_share_claim_is_graded_on_the_gpu_it_would_share():
    """On share-one the share lands on GPU0, already shared, as on share-full; on the free node it
    breaks a whole GPU. Graded as a pod taking nothing, the packing tie-break would put share-one
    below share-full; as a whole GPU, share-full would have none to give."""
    extender = extender_with_shares()
    pod = share_pod("asking", "one")
    async with serving(extender) as client:
        status, graded = await client.post("prioritize", args_body(pod, names=list(NODES)))
    assert status == 200, graded
    scores = host_scores(graded, list(NODES))
    alike = graded_alike(["share-one", "share-full"])
    assert {name: scores[name] for name in alike} == alike and scores["free"] < min(alike.values()), scores
