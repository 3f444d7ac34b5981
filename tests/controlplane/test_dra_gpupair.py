"""gpupair on DRA nodes, on the real control plane (issue 25's acceptance): kube-scheduler's
binding cycle allocates a pod's claims in PreBind, before the extender's bind; the webhook
writes each claim's intent; the reporters write every multi-GPU DRA pod's verdict from its claims.

The fragmented four nodes are tests/dra_support.FRAGMENTED (free {3,4} | {2,3,4,5} | {0,1} |
{4,5,6,7}, the rest held by tenants' one-GPU claims)."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

from gpupair.extender.app import VERBS
from gpupair.extender.every_pod import EVERY_POD_VERB
from gpupair.webhook.claim_pods import CLAIM_POD_RESOURCE
from tests.controlplane.api import Api
from tests.controlplane.dra import (
    RESOURCE, allocated_devices, claim_pod, claim_template, cross_numa, dra_nodes_with_tenants, pod_claims, run_rounds,
    seed_topology_file,
)
from tests.controlplane.gpupair_install import Install, scheduler_extenders
from tests.controlplane.workloads import gpu_pod, scheduling_failures, wait_gone, wait_verdict
from tests.dra_support import FRAGMENTED

INJECT = "gpupair.io/inject"
PLACEMENT = "gpupair.io/placement"
FAIL_REASON = "GPUPlacementFailed"


def fragmented(api: Api, namespace: str, kubelets, scheduler, controller_manager, gpupair, *,
               gpu_entry: bool = True, free: dict[str, set[int]] | None = None,
               topology=seed_topology_file, webhook_env: dict[str, str] | None = None) -> tuple[Install, str]:
    """gpupair as the dra component deploys it (webhook, extender, a reporter per node), the
    extender's scheduler entries registered as shipped (the every-pod entry alone,
    ``gpu_entry=False``), on DRA nodes with ``free`` GPUs and the layout ``topology`` writes (the
    test takes the gpu_device_class fixture: the DeviceClass, removed after it)."""
    install = gpupair("dra")
    install.webhook(webhook_env)
    sim = kubelets()
    controller_manager("resourceclaim-controller")
    _, url = install.extender()
    entries = scheduler_extenders(url)[0 if gpu_entry else 1:]
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": entries})
    dra_nodes_with_tenants(api, sim, namespace, {n: set(f) for n, f in (free or FRAGMENTED).items()},
                           topology=topology)
    for node in sim.nodes.values():
        install.reporter(node)
    return install, url


def template_under(api: Api, namespace: str, name: str, intent: str, scope: str = "",
                   annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A template asking 2 GPUs with no constraint, created once the webhook admits claims in
    ``namespace`` under ``intent`` (and ``scope``): the apiserver matches webhooks against its
    cached namespace labels, so a claim made right after a relabel can still meet the old entry.
    The template that asks nothing is left as written; each claim made from it is planned then."""
    def admitted() -> bool:
        spec = claim_template(namespace, "probe", 2, constraint=None)["spec"]["spec"]
        probe = api.create({"apiVersion": RESOURCE, "kind": "ResourceClaim",
                            "metadata": {"generateName": "probe-", "namespace": namespace}, "spec": spec})
        api.delete(api.path_of(probe))
        said = probe["metadata"].get("annotations") or {}
        return said.get(PLACEMENT) == intent and (not scope or said.get("gpupair.io/scope") == scope)

    api.wait_for(admitted, 20, f"claims in {namespace} admitted under {intent} {scope}", interval=0.2)
    return api.create(claim_template(namespace, name, 2, constraint=None, annotations=annotations))


def reservations(url: str) -> float:
    """The extender's gpupair_extender_reservations gauge."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("gpupair_extender_reservations "):
                return float(line.split()[1])
    raise AssertionError("no gpupair_extender_reservations in the extender's metrics")


def warnings_on(api: Api, namespace: str, pod: str) -> list[str]:
    events = api.list("v1", "Event", namespace, field_selector=f"involvedObject.name={pod}")
    return [e.get("message", "") for e in events if e.get("type") == "Warning" and e.get("reason") == FAIL_REASON]


def bound(api: Api, namespace: str, names: list[str], timeout: float = 60.0) -> list[dict[str, Any]]:
    return api.wait_for(lambda: (lambda ps: ps if all(p["spec"].get("nodeName") for p in ps) else None)(
        [api.get("v1", "Pod", n, namespace) for n in names]), timeout, f"{names} bound")


def rounds(api: Api, namespace: str, make_pod, *, after_bound=None) -> list[dict[str, Any]]:
    """dra.run_rounds (10 rounds of 2 pods created together), and for each pod its verdict (two
    or more GPUs), read within 10 s of seeing it bound, and its Warning Events.
    ``after_bound(pod)`` runs first."""
    seen: dict[str, tuple[dict[str, str], list[str]]] = {}

    def judged(pod: dict[str, Any]) -> None:
        if after_bound is not None:
            after_bound(pod)
        name = pod["metadata"]["name"]
        devices = [d for c in pod_claims(api, pod) for d in allocated_devices(c)]
        verdict = wait_verdict(api, namespace, name, timeout=10.0) if len(devices) >= 2 else {}
        seen[name] = (verdict, warnings_on(api, namespace, name))

    return [{"pod": pod, "node": node, "devices": sorted(devices), "verdict": seen[pod][0], "warnings": seen[pod][1]}
            for pod, node, devices in run_rounds(api, namespace, make_pod, on_bound=judged)]


def as_tuples(grants: list[dict[str, Any]]) -> list[tuple[str, str, list[int]]]:
    return [(g["pod"], g["node"], g["devices"]) for g in grants]


def granted(devices: list[int]) -> str:
    return "+".join(f"GPU{d}" for d in devices)


def matches_allocation(grant: dict[str, Any]) -> bool:
    numa = "+".join(f"NUMA{d // 4}" for d in grant["devices"])
    return grant["verdict"].get("gpupair.io/granted") == granted(grant["devices"]) and \
        grant["verdict"].get("gpupair.io/numa") == numa


def test_ext_pods_get_close_pairs_their_verdicts_and_no_reservation_outlives_their_allocation(
        api, namespace, kubelets, scheduler, controller_manager, gpupair, gpu_device_class):
    """EXT: pods asking nvidia.com/gpu: 2, served from DRA devices; kube-scheduler makes and
    allocates their claims in PreBind, before gpupair's bind (kube-scheduler alone: 9 of 20 SYS;
    test_dra.py checks that control)."""
    _, url = fragmented(api, namespace, kubelets, scheduler, controller_manager, gpupair)
    outlived: list[float] = []

    def holds_end(pod: dict[str, Any]) -> None:
        # The round's pods are bound, their claims allocated before: holds end within a second.
        seen = time.monotonic()
        while reservations(url) > 0:
            if time.monotonic() - seen > 1.0:
                outlived.append(reservations(url))
                return
            time.sleep(0.02)

    grants = rounds(api, namespace, lambda ns, name: gpu_pod(ns, name, 2), after_bound=holds_end)
    assert len(grants) == 20 and not cross_numa(as_tuples(grants)), grants
    assert outlived == [], f"reservations held over a second after their pods' allocations: {outlived}"
    assert all(matches_allocation(g) for g in grants), grants
    assert {(g["verdict"]["gpupair.io/verdict"], g["verdict"]["gpupair.io/verdict-placement"]) for g in grants} \
        == {("PASS", "required")}


def test_claims_as_written_in_a_preferred_namespace_are_placed_with_their_intent_named(
        api, namespace, kubelets, scheduler, controller_manager, gpupair, gpu_device_class):
    """Claim pods from a template asking count: 2 with no constraint, as users write them, in a
    namespace opted in under preferred (test_dra.py has the same under required). The webhook
    rewrites each claim made from the template as firstAvailable and marks the pods, so the extender, registered as
    shipped, best-fits them; each verdict names the intent, PASS with no Warning."""
    fragmented(api, namespace, kubelets, scheduler, controller_manager, gpupair)
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {INJECT: "enabled", PLACEMENT: "preferred"}}})
    template_under(api, namespace, "pair-preferred", "preferred")
    preferred = rounds(api, namespace, lambda ns, name: claim_pod(ns, name, template="pair-preferred"))

    assert len(preferred) == 20 and all(matches_allocation(g) for g in preferred), preferred
    assert {(g["verdict"]["gpupair.io/verdict"], g["verdict"]["gpupair.io/verdict-placement"]) for g in preferred} \
        == {("PASS", "preferred")}
    assert not [g for g in preferred if g["warnings"]]


def test_a_cross_numa_grant_fails_only_where_the_pod_asked_for_required(
        api, namespace, kubelets, scheduler, controller_manager, gpupair, gpu_device_class):
    """One DRA node with GPU3 and GPU4 free: a two-GPU claim without a constraint would get the
    SYS pair. Not opted in (the extender's default intent, required): the marked claim pod
    reaches the extender, which refuses the node, and the pod waits with gpupair's reason as its
    FailedScheduling message. Opted in under none, then preferred: placed, PASS, the intent
    named, no Warning. Opted in under required: the webhook's constraint keeps it pending. A claim
    whose pcieRoot constraint no node meets waits with gpupair's reason too, though DynamicResources
    refused the node before the extender could be asked."""
    fragmented(api, namespace, kubelets, scheduler, controller_manager, gpupair, free={"dra-node-1": {3, 4}})
    api.create(claim_template(namespace, "as-written", 2, constraint=None))
    api.create(claim_pod(namespace, "as-written", template="as-written"))
    reason = api.wait_for(lambda: [m for m in scheduling_failures(api, namespace, "as-written") if "NUMA" in m],
                          30, "gpupair's reason in a FailedScheduling event")
    assert not api.get("v1", "Pod", "as-written", namespace)["spec"].get("nodeName")
    api.delete(api.path("v1", "Pod", "as-written", namespace), grace=0)
    wait_gone(api, namespace, ["as-written"])
    outcomes = {}
    for label, template in (("none", "under-none"), ("preferred", "under-preferred")):
        api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {INJECT: "enabled", PLACEMENT: label}}})
        template_under(api, namespace, template, label)
        api.create(claim_pod(namespace, template, template=template))
        [pod] = bound(api, namespace, [template])
        devices = [d for c in pod_claims(api, pod) for d in allocated_devices(c)]
        verdict = wait_verdict(api, namespace, template, timeout=10.0)
        outcomes[template] = (sorted(devices), verdict["gpupair.io/link"], verdict["gpupair.io/verdict"],
                              verdict["gpupair.io/verdict-placement"], bool(warnings_on(api, namespace, template)))
        api.delete(api.path("v1", "Pod", template, namespace), grace=0)
        wait_gone(api, namespace, [template])
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {PLACEMENT: "required"}}})
    template_under(api, namespace, "under-required", "required")
    api.create(claim_pod(namespace, "under-required", template="under-required"))
    # One pcieRoot per GPU on this board: DynamicResources refuses the node, kube-scheduler never
    # asks the extender, and the extender's pod watch gives the reason.
    api.create(claim_template(namespace, "same-root", 2, constraint="resource.kubernetes.io/pcieRoot"))
    api.create(claim_pod(namespace, "same-root", template="same-root"))
    same_root = api.wait_for(lambda: [m for m in scheduling_failures(api, namespace, "same-root")
                                      if m.startswith("gpupair:")], 30, "gpupair's reason for the pcieRoot claim")
    waiting = api.get("v1", "Pod", "under-required", namespace)

    assert "1 need 2 GPUs on one NUMA node; free: NUMA0=1 NUMA1=1" in reason[0], reason
    assert outcomes == {
        "under-none": ([3, 4], "SYS", "PASS", "none", False),
        "under-preferred": ([3, 4], "SYS", "PASS", "preferred", False),
    }
    assert not waiting["spec"].get("nodeName")
    # (each Event is listed twice: core v1 and events.k8s.io/v1 share one storage)
    assert set(same_root) == {"gpupair: no DRA node can allocate this pod's claims: need 2 GPUs with one "
                              "resource.kubernetes.io/pcieRoot; dra-node-1: free GPU3 (pci0000:60) | GPU4 (pci0000:80)"}


def extender_requests(url: str, verbs: set[str]) -> float:
    """The requests the extender has answered on ``verbs``, by its own gpupair_extender_requests_total."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        lines = response.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("gpupair_extender_requests_total{")
               and any(f'verb="{verb}"' in line for verb in verbs))


GPU_ENTRY_VERBS = set(VERBS)  # the GPU entry's (and prioritize, which no shipped entry lists)


def ones_then_fours(api: Api, namespace: str, sure: int) -> tuple[list[tuple[str, str, list[int]]], list[str]]:
    """On four empty nodes: 4 one-GPU claim pods, each bound before the next, then 8 four-GPU
    claim pods under a numaNode constraint, one at a time. The four-GPU pods placed (with their
    devices, each verdict PASS and naming them) and those left waiting; once ``sure`` are placed,
    the next is given 8 s (30 s before)."""
    api.create(claim_template(namespace, "one", 1, constraint=None))
    api.create(claim_template(namespace, "four", 4))
    for i in range(4):
        api.create(claim_pod(namespace, f"one-{i}", template="one"))
        bound(api, namespace, [f"one-{i}"])
    placed, waiting = [], []
    for i in range(8):
        name = f"four-{i}"
        api.create(claim_pod(namespace, name, template="four"))
        try:
            [pod] = bound(api, namespace, [name], timeout=8.0 if len(placed) >= sure else 30.0)
        except TimeoutError:
            waiting.append(name)
            continue
        devices = [d for c in pod_claims(api, pod) for d in allocated_devices(c)]
        placed.append((name, pod["spec"]["nodeName"], sorted(devices)))
        verdict = wait_verdict(api, namespace, name, timeout=10.0)
        assert verdict["gpupair.io/granted"] == granted(sorted(devices)) and verdict["gpupair.io/verdict"] == "PASS"
    return placed, waiting


def test_as_installed_claim_pods_reach_the_extender_and_cpu_pods_only_the_every_pod_entry(
        api, namespace, kubelets, scheduler, controller_manager, gpupair, gpu_device_class):
    """Four empty nodes, gpupair as the dra component installs it, both shipped scheduler entries
    (the GPU entry and the every-pod entry). 4 one-GPU claims, then 8 four-GPU claims under a
    numaNode constraint: the webhook marks every claim pod, the extender best-fits the one-GPU
    claims into one NUMA node (the every-pod entry scoring them), so 7 of the 8 fit
    (kube-scheduler alone placed 6). Then 20 CPU-only pods at once: all placed, each scored by
    the every-pod entry, none sent to the GPU entry."""
    empty = {name: set(range(8)) for name in FRAGMENTED}
    _, url = fragmented(api, namespace, kubelets, scheduler, controller_manager, gpupair, free=empty)
    placed, waiting = ones_then_fours(api, namespace, sure=6)
    assert len(placed) == 7 and len(waiting) == 1, (placed, waiting)
    assert not cross_numa(placed)
    marked = api.get("v1", "Pod", "four-0", namespace)["spec"]["containers"][0]["resources"]
    assert marked["requests"].get(CLAIM_POD_RESOURCE) == marked["limits"].get(CLAIM_POD_RESOURCE) == "0"

    gpu_entry, every_pod = extender_requests(url, GPU_ENTRY_VERBS), extender_requests(url, {EVERY_POD_VERB})
    cpu = [f"cpu-{i}" for i in range(20)]
    for name in cpu:
        api.create(gpu_pod(namespace, name, 0))
    bound(api, namespace, cpu)
    assert gpu_entry > 0 and extender_requests(url, GPU_ENTRY_VERBS) == gpu_entry
    assert extender_requests(url, {EVERY_POD_VERB}) == every_pod + 20


def test_a_marked_claim_pod_with_no_entry_naming_the_mark_is_placed_by_kube_scheduler_alone(
        api, namespace, kubelets, scheduler, controller_manager, gpupair, gpu_device_class):
    """The install-order window, and any configuration without the GPU entry: the dra component
    applied (the webhook marks claim pods) while kube-scheduler runs only the every-pod entry,
    which names no resource. The zero mark strands nothing: every claim pod is scheduled as
    kube-scheduler alone schedules it (the one-GPU claims, and 4 to 7 of the four-GPU claims, as
    without gpupair), and a pod that waits does so for its devices, never on "Insufficient
    gpupair.io/claim" (with a mark of one, the first one-GPU claim pod waited: "0/4 nodes are
    available: 4 Insufficient gpupair.io/claim")."""
    empty = {name: set(range(8)) for name in FRAGMENTED}
    _, url = fragmented(api, namespace, kubelets, scheduler, controller_manager, gpupair, free=empty,
                        gpu_entry=False)
    placed, waiting = ones_then_fours(api, namespace, sure=4)
    marked = api.get("v1", "Pod", "one-0", namespace)["spec"]["containers"][0]["resources"]["limits"]
    reasons = {name: scheduling_failures(api, namespace, name) for name in waiting}

    assert marked.get(CLAIM_POD_RESOURCE) == "0"
    # Each node's second NUMA node holds one at least; the rest is kube-scheduler's tie-breaking.
    assert len(placed) >= 4 and len(placed) + len(waiting) == 8, (placed, waiting)
    assert all(r and not [m for m in r if CLAIM_POD_RESOURCE in m] for r in reasons.values()), reasons
    assert extender_requests(url, GPU_ENTRY_VERBS) == 0
