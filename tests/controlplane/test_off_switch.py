"""Turning gpupair off on the real kube-scheduler and apiserver v1.36, as deploy/README.md
("Removing", "The emergency bypass") says to.

The documented removal: the scheduler entries out first (kube-scheduler restarted without them),
then gpupair's objects deleted. GPU pods placed before keep their nodes, and new GPU pods are
placed and bound by kube-scheduler alone. Deleting the extender first instead, while the GPU entry
still names it, leaves every new GPU pod Pending: that is why the order matters, and what the
bypass is for.

The emergency bypass: the GPU entry with ``ignorable: true`` (the chart's
``scheduler.gpuEntry.ignorable``, rendered by the chart itself), with the extender down: the GPU
pod that waited on the dead extender is placed and bound by kube-scheduler, as is every new one.

Second-scheduler mode's removal: the webhook configuration deleted first, so new multi-GPU pods
stay with the cluster's scheduler; gpupair-scheduler gone, a pod that still names it waits for
good, and the way out (deleted, made again without the name) is placed by kube-scheduler. The
field selector the removal waits with finds exactly the pods Pending on gpupair-scheduler.
"""

from __future__ import annotations

import yaml

from gpupair.decide.judge.verdict import PLANNED_KEY
from tests.controlplane.gpupair_install import scheduler_extenders
from tests.controlplane.workloads import SEED_TOPO, gpu_pod, pending_for, scheduling_failures
from tests.deploy_manifests import helm_template

NODES = ("off-1", "off-2")
DEFAULT_PROFILE = {"profiles": [{"schedulerName": "default-scheduler"}]}


def placed(api, sim, namespace: str, names: list[str]) -> dict[str, dict]:
    """The pods once admitted on their nodes, by name."""
    sim.wait_admitted(namespace, names, timeout=60)
    return {name: api.get("v1", "Pod", name, namespace) for name in names}


def planned_by_gpupair(pod: dict) -> bool:
    """The extender bound it: its Binding wrote the plan on the pod."""
    return PLANNED_KEY in (pod["metadata"].get("annotations") or {})


def gpu_nodes_with_gpupair(api, kubelets, gpupair):
    install = gpupair("device-plugin")
    sim = kubelets(policy="aligned")
    for node in NODES:
        sim.add_node(node, SEED_TOPO)
        install.reporter(sim.nodes[node])
    extender, url = install.extender()
    return install, sim, extender, url


def test_the_documented_removal_leaves_gpu_pods_to_kube_scheduler(api, namespace, kubelets, scheduler, gpupair):
    install, sim, extender, url = gpu_nodes_with_gpupair(api, kubelets, gpupair)
    with_gpupair = scheduler({**DEFAULT_PROFILE, "extenders": scheduler_extenders(url)})
    for name in ("before-1", "before-2"):
        api.create(gpu_pod(namespace, name, 2))
    before = placed(api, sim, namespace, ["before-1", "before-2"])
    assert all(planned_by_gpupair(pod) for pod in before.values()), "gpupair placed the first pods"

    # 1. the scheduler entries out: kube-scheduler restarted with its configuration less both entries
    with_gpupair.stop()
    scheduler(DEFAULT_PROFILE)
    # 2. then gpupair itself: its processes stopped, its objects deleted (kubectl delete -k; the
    # harness keeps the gpupair-system namespace, which other tests share)
    for process in list(install.processes):
        process.stop()
    for obj in install.objects:
        if obj["kind"] != "Namespace":
            api.delete(obj)
    assert api.find("apps/v1", "Deployment", "gpupair-extender", "gpupair-system") is None

    for name in ("after-1", "after-2"):
        api.create(gpu_pod(namespace, name, 2))
    after = placed(api, sim, namespace, ["after-1", "after-2"])
    assert not any(planned_by_gpupair(pod) for pod in after.values()), "kube-scheduler alone bound them"
    for name, pod in before.items():  # the pods gpupair placed keep their nodes
        assert api.get("v1", "Pod", name, namespace)["spec"]["nodeName"] == pod["spec"]["nodeName"]
    assert not sim.errors, sim.errors


def test_the_second_schedulers_pending_pods_are_found_as_documented(api, namespace):
    """The removal's wait, as deploy/README.md and the notes print it: the field selector lists a
    pod that names gpupair-scheduler and waits (no such scheduler runs here), and no other."""
    named = gpu_pod(namespace, "names-gpupair-scheduler", 2)
    named["spec"]["schedulerName"] = "gpupair-scheduler"
    api.create(named)
    api.create(gpu_pod(namespace, "names-none", 2))
    found = api.list("v1", "Pod", "", field_selector="spec.schedulerName=gpupair-scheduler,status.phase=Pending")
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in found] == [
        (namespace, "names-gpupair-scheduler")]


def test_the_bypass_places_gpu_pods_with_the_extender_down(api, namespace, kubelets, scheduler, gpupair):
    install, sim, extender, url = gpu_nodes_with_gpupair(api, kubelets, gpupair)
    shipped = scheduler({**DEFAULT_PROFILE, "extenders": scheduler_extenders(url)})
    api.create(gpu_pod(namespace, "up", 2))
    assert planned_by_gpupair(placed(api, sim, namespace, ["up"])["up"])

    # the extender goes down with the GPU entry as shipped (ignorable: false): GPU pods wait
    extender.stop()
    api.create(gpu_pod(namespace, "during-outage", 2))
    assert pending_for(api, namespace, ["during-outage"], 5) == ["during-outage"]
    failures = scheduling_failures(api, namespace, "during-outage")
    assert failures and any("filter" in reason for reason in failures), failures

    # the bypass: the GPU entry as the chart renders it with scheduler.gpuEntry.ignorable, the
    # extender still down
    objs = helm_template({"scheduler": {"mode": "second-scheduler", "gpuEntry": {"ignorable": True}}})
    config = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith(
        "gpupair-scheduler-config"))
    entries = yaml.safe_load(config["data"]["config.yaml"])["extenders"]
    assert entries[0]["ignorable"] is True and "bindVerb" in entries[0]
    shipped.stop()
    scheduler({**DEFAULT_PROFILE, "extenders": [{**e, "urlPrefix": url} for e in entries]})
    api.create(gpu_pod(namespace, "bypassed", 2))
    pods = placed(api, sim, namespace, ["during-outage", "bypassed"])
    assert not any(planned_by_gpupair(pod) for pod in pods.values()), "bound by kube-scheduler, not gpupair"
    assert not sim.errors, sim.errors


def chart_second_scheduler_config(url: str) -> dict:
    """gpupair-scheduler's configuration as the chart renders it, its entries pointed at ``url``."""
    objs = helm_template({"scheduler": {"mode": "second-scheduler"}})
    config = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith(
        "gpupair-scheduler-config"))
    rendered = yaml.safe_load(config["data"]["config.yaml"])
    return {"profiles": rendered["profiles"], "extenders": [{**e, "urlPrefix": url} for e in rendered["extenders"]]}


def test_the_second_schedulers_removal_and_its_way_out(api, namespace, kubelets, scheduler, gpupair):
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {"gpupair.io/inject": "enabled"}}})
    install, sim, extender, url = gpu_nodes_with_gpupair(api, kubelets, gpupair)
    install.webhook({"GPUPAIR_WEBHOOK_SCHEDULER_NAME": "gpupair-scheduler"})  # as second-scheduler mode sets it
    scheduler(DEFAULT_PROFILE)  # the cluster's own
    second = scheduler(chart_second_scheduler_config(url))
    api.create(gpu_pod(namespace, "routed", 2))
    routed = placed(api, sim, namespace, ["routed"])["routed"]
    assert routed["spec"]["schedulerName"] == "gpupair-scheduler" and planned_by_gpupair(routed)

    # 1. no more routing: new multi-GPU pods stay with the cluster's scheduler
    install.remove_webhook_configuration()
    made = api.wait_for(lambda: _unrouted(api, namespace), 30, "a pod the webhook no longer routes")
    placed(api, sim, namespace, [made["metadata"]["name"]])
    # 2. gpupair-scheduler gone: a pod that still names it waits, and is found by the documented wait
    second.stop()
    for process in list(install.processes):
        process.stop()
    stuck = gpu_pod(namespace, "stuck", 2)
    stuck["spec"]["schedulerName"] = "gpupair-scheduler"
    api.create(stuck)
    assert pending_for(api, namespace, ["stuck"], 3) == ["stuck"]
    waiting = api.list("v1", "Pod", "", field_selector="spec.schedulerName=gpupair-scheduler,status.phase=Pending")
    assert [p["metadata"]["name"] for p in waiting] == ["stuck"]
    # the way out: delete it, make it again without the name (a controller would)
    api.delete(api.get("v1", "Pod", "stuck", namespace))
    api.wait_for(lambda: api.find("v1", "Pod", "stuck", namespace) is None or None, 30, "stuck deleted")
    api.create(gpu_pod(namespace, "stuck", 2))
    again = placed(api, sim, namespace, ["stuck"])["stuck"]
    assert again["spec"]["schedulerName"] == "default-scheduler" and not planned_by_gpupair(again)
    assert not sim.errors, sim.errors


def _unrouted(api, namespace: str):
    """A 2-GPU pod created now, once the apiserver has dropped the deleted webhook configuration:
    the pod if it kept the default scheduler, else None (and it is deleted)."""
    made = api.create({**gpu_pod(namespace, "", 2), "metadata": {"generateName": "unrouted-", "namespace": namespace}})
    if made["spec"].get("schedulerName") == "default-scheduler":
        return made
    api.delete(made)
    return None
