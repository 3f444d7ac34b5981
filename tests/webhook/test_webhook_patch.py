"""The pod plan on real pod shapes: the patch applied with a JSON-patch library, the pod checked."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonpatch
import pytest

from gpupair.decide.judge import verdict
from gpupair.decide.pod.intent import PLACEMENT_KEY, Intent, IntentError
from gpupair.decide.pod.pod_request import PodRequestError, gpu_request
from tests.pss import restricted_violations
from gpupair.webhook import sidecar
from gpupair.webhook.admission import (
    VERIFIER_KEY,
    VERIFY_KEY,
    InjectOptions,
    plan,
    pointer,
)
from gpupair.webhook.sidecar import SidecarOptions
from tests.real_k8s import REAL_K8S

FIXTURE = REAL_K8S / "admission-pod-create-p1-05-job-generatename.json"
IMAGE = "registry.example/gpupair:test"
OPTIONS = InjectOptions(sidecar=SidecarOptions(image=IMAGE, reporter_port=9400))


def job_pod() -> dict:
    """The pod a real v1.36 apiserver sent for a Job (2 GPUs, generateName, no uid)."""
    return json.loads(FIXTURE.read_text())["request"]["object"]


def pod_with(gpus: int | None, *, init_gpus: int | None = None, annotations: dict | None = None) -> dict:
    pod = job_pod()
    container = pod["spec"]["containers"][0]
    if gpus is None:
        container.pop("resources")
    else:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}}
    if init_gpus is not None:
        pod["spec"]["initContainers"] = [{
            "name": "warmup", "image": "registry.invalid/warmup:1",
            "resources": {"limits": {"nvidia.com/gpu": str(init_gpus)}},
        }]
    if annotations is not None:
        pod["metadata"]["annotations"] = annotations
    return pod


def patched(pod: dict, options: InjectOptions = OPTIONS) -> tuple[dict, list[dict]]:
    ops = plan(pod, options).ops
    # Round-trip through JSON as the apiserver receives it.
    ops = json.loads(json.dumps(ops))
    return jsonpatch.apply_patch(pod, ops), ops


def verifiers(pod: dict) -> list[dict]:
    spec = pod["spec"]
    return [c for c in (spec.get("initContainers") or []) + spec["containers"] if c["name"] == sidecar.CONTAINER_NAME]


def test_two_gpu_job_pod_gets_one_native_sidecar_and_its_token_volume():
    pod = job_pod()
    before = copy.deepcopy(pod)
    after, ops = patched(pod)

    assert pod == before, "plan must not modify its input"
    [verifier] = verifiers(after)
    assert after["spec"]["initContainers"] == [verifier]  # created: the pod had no initContainers
    assert verifier["restartPolicy"] == "Always"
    assert verifier["image"] == IMAGE and verifier["args"] == ["verify"]
    env = {e["name"]: e for e in verifier["env"]}
    assert {name: env[name]["valueFrom"]["fieldRef"]["fieldPath"] for name, _ in sidecar.DOWNWARD_ENV} == {
        "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid",
        "NODE_NAME": "spec.nodeName", "HOST_IP": "status.hostIP",
    }
    assert env["GPUPAIR_REPORTER_PORT"]["value"] == "9400"
    assert env["GPUPAIR_VERIFY_TOKEN_PATH"]["value"] == sidecar.TOKEN_PATH
    assert env["GPUPAIR_TOKEN_AUDIENCE"]["value"] == "gpupair-reporter"
    assert verifier["resources"]["requests"] == {"cpu": "10m", "memory": "16Mi"}
    assert set(verifier["resources"]["limits"]) == {"cpu", "memory"}
    assert "nvidia.com/gpu" not in json.dumps(verifier["resources"])

    volumes = {v["name"]: v for v in after["spec"]["volumes"]}
    assert set(volumes) == {"kube-api-access-dsrmc", sidecar.TOKEN_VOLUME}  # appended, original kept
    [source] = volumes[sidecar.TOKEN_VOLUME]["projected"]["sources"]
    assert source == {"serviceAccountToken": {"audience": "gpupair-reporter", "expirationSeconds": 600,
                                              "path": "token"}}
    [mount] = verifier["volumeMounts"]
    assert mount == {"name": sidecar.TOKEN_VOLUME, "mountPath": sidecar.TOKEN_DIR, "readOnly": True}
    assert sidecar.TOKEN_PATH.startswith(mount["mountPath"] + "/")

    # Original containers untouched, GPU request unchanged by the sidecar.
    assert after["spec"]["containers"] == before["spec"]["containers"]
    assert gpu_request(after) == gpu_request(before) == 2
    assert after["metadata"]["annotations"] == {VERIFIER_KEY: "injected", PLACEMENT_KEY: "required"}
    # The fixture pod has no annotations map: it is created whole rather than added into.
    assert {"op": "add", "path": "/metadata/annotations",
            "value": {VERIFIER_KEY: "injected", PLACEMENT_KEY: "required"}} in ops


def test_the_token_audience_flows_from_the_webhook_into_the_token_and_the_verifier():
    options = InjectOptions(sidecar=SidecarOptions(image=IMAGE, token_audience="reporter.example"))
    after, _ = patched(job_pod(), options)
    [verifier] = verifiers(after)
    volumes = {v["name"]: v for v in after["spec"]["volumes"]}
    [source] = volumes[sidecar.TOKEN_VOLUME]["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "reporter.example"
    assert {"name": "GPUPAIR_TOKEN_AUDIENCE", "value": "reporter.example"} in verifier["env"]


@pytest.mark.parametrize("gpus, injected", [(None, False), (0, False), (1, False), (2, True), (8, True)])
def test_only_pods_at_or_above_min_gpus_are_changed(gpus, injected):
    pod = pod_with(gpus)
    after, ops = patched(pod)
    assert bool(ops) is injected
    assert len(verifiers(after)) == (1 if injected else 0)


def test_min_gpus_is_a_flag():
    options = InjectOptions(sidecar=SidecarOptions(image=IMAGE), min_gpus=4)
    assert plan(pod_with(2), options).ops == []
    assert len(verifiers(patched(pod_with(4), options)[0])) == 1
    with pytest.raises(ValueError):
        InjectOptions(sidecar=SidecarOptions(image=IMAGE), min_gpus=0)


def test_gpus_requested_only_by_an_init_container_count():
    pod = pod_with(None, init_gpus=2)
    after, ops = patched(pod)
    assert [c["name"] for c in after["spec"]["initContainers"]] == ["warmup", sidecar.CONTAINER_NAME]
    # Appended with "-" to the existing array, not replacing it.
    assert {"op": "add", "path": "/spec/initContainers/-", "value": verifiers(after)[0]} in ops
    assert after["spec"]["initContainers"][0] == pod["spec"]["initContainers"][0]


def test_other_resource_name():
    pod = pod_with(None)
    pod["spec"]["containers"][0]["resources"] = {"limits": {"amd.com/gpu": "2"}}
    assert plan(pod, OPTIONS).ops == []
    options = InjectOptions(sidecar=SidecarOptions(image=IMAGE), resource_name="amd.com/gpu")
    assert len(verifiers(patched(pod, options)[0])) == 1


def test_reinvocation_and_already_injected_pods_are_left_alone():
    once, _ = patched(job_pod())
    assert plan(once, OPTIONS).ops == []
    assert plan(once, OPTIONS).outcome == "already-injected"
    # A pod that carries a container of that name in its app containers counts as injected too.
    pod = job_pod()
    pod["spec"]["containers"].append({"name": sidecar.CONTAINER_NAME, "image": "x"})
    assert plan(pod, OPTIONS).ops == []


def test_opt_out_annotation():
    pod = pod_with(8, annotations={VERIFY_KEY: "false", "team": "a"})
    assert plan(pod, OPTIONS).ops == []
    assert plan(pod, OPTIONS).outcome == "opted-out"
    # Any other value (or none) does not opt out.
    pod["metadata"]["annotations"][VERIFY_KEY] = "true"
    assert len(verifiers(patched(pod)[0])) == 1


def test_annotation_keys_are_json_pointer_escaped_and_existing_annotations_kept():
    pod = pod_with(2, annotations={"team": "a", "x~y/z": "kept"})
    after, ops = patched(pod)
    assert {"op": "add", "path": "/metadata/annotations/gpupair.io~1verifier", "value": "injected"} in ops
    assert after["metadata"]["annotations"] == {"team": "a", "x~y/z": "kept", VERIFIER_KEY: "injected",
                                                PLACEMENT_KEY: "required"}
    assert pointer("metadata", "annotations", "a~b/c") == "/metadata/annotations/a~0b~1c"


def test_verdict_annotations_set_at_creation_are_removed():
    forged = {verdict.VERDICT_KEY: "PASS", verdict.GRANTED_KEY: "GPU0+GPU1", verdict.PLANNED_KEY: "GPU0+GPU1",
              "team": "a"}
    after, _ = patched(pod_with(2, annotations=forged))
    assert after["metadata"]["annotations"] == {"team": "a", VERIFIER_KEY: "injected", PLACEMENT_KEY: "required"}


def test_a_taken_volume_name_skips_injection_with_a_warning():
    pod = job_pod()
    pod["spec"]["volumes"].append({"name": sidecar.TOKEN_VOLUME, "emptyDir": {}})
    result = plan(pod, OPTIONS)
    assert result.ops == [] and result.outcome == "name-taken"
    assert sidecar.TOKEN_VOLUME in result.notes[0]


@pytest.mark.parametrize("own,expected", [
    (None, ["regcred", "mirror"]),
    ([], ["regcred", "mirror"]),
    ([{"name": "team-creds"}], ["team-creds", "regcred", "mirror"]),
    ([{"name": "mirror"}, {"name": "team-creds"}], ["mirror", "team-creds", "regcred"]),
])
def test_the_verifiers_pull_secrets_are_added_after_the_pods_own(own, expected):
    """A private registry: the injected pod names the sidecar image's pull secrets, each once,
    after those it named itself; a pod without the sidecar is not given them."""
    options = InjectOptions(sidecar=SidecarOptions(image=IMAGE, image_pull_secrets=("regcred", "mirror")))
    pod = pod_with(2)
    if own is not None:
        pod["spec"]["imagePullSecrets"] = own
    result, _ = patched(pod, options)
    assert [s["name"] for s in result["spec"]["imagePullSecrets"]] == expected
    one_gpu, _ = patched(pod_with(1), options)
    assert "imagePullSecrets" not in one_gpu["spec"]
    opted_out, _ = patched(pod_with(2, annotations={VERIFY_KEY: "false"}), options)
    assert "imagePullSecrets" not in opted_out["spec"]
    assert "imagePullSecrets" not in patched(pod_with(2))[0]["spec"], "none configured: none added"


def test_missing_volumes_array_is_created():
    pod = job_pod()
    del pod["spec"]["volumes"]
    after, ops = patched(pod)
    assert after["spec"]["volumes"] == [sidecar.token_volume(OPTIONS.sidecar)]
    assert {"op": "add", "path": "/spec/volumes", "value": [sidecar.token_volume(OPTIONS.sidecar)]} in ops


@pytest.mark.parametrize("current, expected", [
    ("default-scheduler", "gpupair-scheduler"),  # the apiserver's default, as in the fixture
    ("", "gpupair-scheduler"),
    (None, "gpupair-scheduler"),
    ("volcano", "volcano"),  # a pod that chose a scheduler keeps it
])
def test_scheduler_name_routes_multi_gpu_pods_that_left_the_default(current, expected):
    options = InjectOptions(sidecar=SidecarOptions(image=IMAGE), scheduler_name="gpupair-scheduler")
    pod = job_pod()
    if current is None:
        del pod["spec"]["schedulerName"]
    else:
        pod["spec"]["schedulerName"] = current
    after, _ = patched(pod, options)
    assert after["spec"]["schedulerName"] == expected
    assert plan(pod, options).routed is (expected != current)
    # A 1-GPU pod is never rerouted.
    single = pod_with(1)
    assert patched(single, options)[0]["spec"]["schedulerName"] == "default-scheduler"


def test_opted_out_pods_are_still_routed_but_not_injected():
    options = InjectOptions(sidecar=SidecarOptions(image=IMAGE), scheduler_name="gpupair-scheduler")
    after, _ = patched(pod_with(2, annotations={VERIFY_KEY: "false"}), options)
    assert after["spec"]["schedulerName"] == "gpupair-scheduler" and verifiers(after) == []
    assert plan(after, options).ops == []  # reinvocation: nothing more to do


@pytest.mark.parametrize("pod", [
    [], "pod", {"spec": "x"}, {"spec": {"containers": "x"}},
    {"spec": {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "two"}}}]}},
])
def test_unreadable_pods_raise_pod_request_error(pod):
    with pytest.raises(PodRequestError):
        plan(pod, OPTIONS)


# --- Pod Security Standard: restricted ------------------------------------------------------------


def restricted_workload() -> dict:
    pod = job_pod()
    pod["spec"]["containers"][0]["securityContext"] = {
        "runAsNonRoot": True, "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
    }
    return pod


def test_injected_pod_passes_the_restricted_standard():
    pod = restricted_workload()
    assert restricted_violations(pod) == []
    after, _ = patched(pod)
    assert restricted_violations(after) == []
    verifier = verifiers(after)[0]["securityContext"]
    assert verifier["readOnlyRootFilesystem"] is True and verifier["runAsUser"] != 0


def test_injection_adds_no_violation_to_a_non_compliant_pod():
    # The Job fixture's app container sets nothing; whatever it violates, the verifier must not.
    pod = job_pod()
    after, _ = patched(pod)
    before = restricted_violations(pod)
    assert before  # the check does see the app container's gaps
    assert restricted_violations(after) == before
    assert not any(sidecar.CONTAINER_NAME in v or sidecar.TOKEN_VOLUME in v for v in restricted_violations(after))


@pytest.mark.parametrize("mutate, expected", [
    (lambda p: p["spec"].update(hostNetwork=True), "host namespaces"),
    (lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "hostPath"),
    (lambda p: p["spec"]["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}), "volume types"),
    (lambda p: p["spec"]["containers"][0]["securityContext"].update(privileged=True), "privileged"),
    (lambda p: p["spec"]["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
     "allowPrivilegeEscalation"),
    (lambda p: p["spec"]["containers"][0]["securityContext"].update(runAsUser=0), "runAsUser"),
    (lambda p: p["spec"]["containers"][0]["securityContext"].pop("runAsNonRoot"), "runAsNonRoot"),
    (lambda p: p["spec"]["containers"][0]["securityContext"].update(capabilities={"drop": ["NET_RAW"]}),
     "drop ALL"),
    (lambda p: p["spec"]["containers"][0]["securityContext"].update(
        capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}), "capabilities"),
    (lambda p: p["spec"]["containers"][0]["securityContext"].update(seccompProfile={"type": "Unconfined"}),
     "seccomp"),
    (lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]), "host ports"),
    (lambda p: p["spec"]["containers"][0].update(
        readinessProbe={"httpGet": {"host": "10.0.0.1", "port": 80}}), "host probes"),
    (lambda p: p["spec"].setdefault("securityContext", {}).update(
        sysctls=[{"name": "kernel.msgmax", "value": "1"}]), "sysctls"),
    (lambda p: p["spec"]["containers"][0]["securityContext"].update(procMount="Unmasked"), "procMount"),
    (lambda p: p["spec"]["containers"][0]["securityContext"].update(
        seLinuxOptions={"type": "spc_t"}), "seLinux"),
])
def test_the_restricted_check_catches_each_control(mutate, expected):
    pod = restricted_workload()
    mutate(pod)
    violations = restricted_violations(pod)
    assert any(expected in v for v in violations), violations


def test_user_namespaced_pods_are_relaxed_for_run_as_root():
    pod = restricted_workload()
    del pod["spec"]["containers"][0]["securityContext"]["runAsNonRoot"]
    pod["spec"]["hostUsers"] = False
    assert restricted_violations(pod) == []


# --------------------------------------------------------------------------- placement intent


@pytest.mark.parametrize("namespace, default, written", [
    (None, Intent.REQUIRED, "required"),  # the cluster default, written for the verdict
    (None, Intent.PREFERRED, "preferred"),
    (Intent.NONE, Intent.PREFERRED, "none"),  # the namespace's default beats the cluster's
])
def test_an_injected_pod_carries_the_placement_that_applies(namespace, default, written):
    options = InjectOptions(sidecar=OPTIONS.sidecar, default_intent=default)
    result = plan(job_pod(), options, namespace)
    after = jsonpatch.apply_patch(job_pod(), result.ops)
    assert after["metadata"]["annotations"][PLACEMENT_KEY] == written == result.placement


def test_the_pods_own_placement_wins_and_is_left_as_written():
    pod = pod_with(2, annotations={PLACEMENT_KEY: "None"})
    after, ops = patched(pod)
    assert after["metadata"]["annotations"][PLACEMENT_KEY] == "None"
    assert not [op for op in ops if op["path"].endswith("placement")]


@pytest.mark.parametrize("pod, outcome", [
    (pod_with(4, annotations={VERIFY_KEY: "false"}), "opted-out"),
    (pod_with(3), "few-gpus"),  # below --min-gpus 4 here, but still a multi-GPU pod
])
def test_uninjected_pods_get_only_a_namespace_default(pod, outcome):
    options = InjectOptions(sidecar=OPTIONS.sidecar, min_gpus=4)
    assert plan(pod, options).ops == []  # the extender applies its own (cluster) default
    result = plan(pod, options, Intent.PREFERRED)
    assert result.outcome == outcome
    assert jsonpatch.apply_patch(pod, result.ops)["metadata"]["annotations"][PLACEMENT_KEY] == "preferred"


def test_one_gpu_pods_get_no_placement():
    assert plan(pod_with(1), OPTIONS, Intent.NONE).ops == []


def test_a_bad_placement_raises_intent_error():
    with pytest.raises(IntentError, match="'requried' is not a placement gpupair knows"):
        plan(pod_with(2, annotations={PLACEMENT_KEY: "requried"}), OPTIONS)
