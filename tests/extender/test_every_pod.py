"""The every-pod entry's verb, POST /prioritize-every-pod (extender/every_pod.py): every pod is
scored there, a GPU pod and a DRA claim pod as prioritize scores them, a CPU pod too; its
requests are counted apart from the GPU entry's."""

from __future__ import annotations

from gpupair.extender.every_pod import EVERY_POD_VERB
from gpupair.kubewire.defaults import CLAIM_POD_RESOURCE
from tests.controlplane.faults import metric_total
from tests.extender.test_fragmentation_score import roomy_and_tight, with_cpu
from tests.extender_support import args_body, eventually, host_scores, kube_extender, make_extender, pod_object, serving
from tests.kube_double import running_kube_double


async def test_every_pod_is_scored_as_prioritize_scores_it():
    async with running_kube_double() as double:
        roomy_and_tight(double)
        names = ["roomy", "tight"]
        async with kube_extender(double, fragmentation=True) as k:
            await eventually(lambda: k.extender.ready())
            cpu_pod = args_body(with_cpu(pod_object(0, uid="web"), "8"), names=names)
            gpu_pod = args_body(with_cpu(pod_object(1, uid="one"), "1"), names=names)
            claim_pod = pod_object(0, uid="claims")
            claim_pod["spec"]["containers"][0]["resources"]["limits"] = {CLAIM_POD_RESOURCE: "0"}
            answers = {}
            for kind, body in (("cpu", cpu_pod), ("gpu", gpu_pod), ("claim", args_body(claim_pod, names=names))):
                for verb in (EVERY_POD_VERB, "prioritize"):
                    _, answer = await k.client.post(verb, body)
                    answers[kind, verb] = host_scores(answer, names)
            _, metrics = await k.client.get("/metrics")
    for kind in ("cpu", "gpu", "claim"):
        assert answers[kind, EVERY_POD_VERB] == answers[kind, "prioritize"], kind
    assert answers["cpu", EVERY_POD_VERB] == {"roomy": 10, "tight": 0}  # on "tight" it strands four GPUs
    assert answers["gpu", EVERY_POD_VERB] != {"roomy": 0, "tight": 0}, "the GPU pod is scored"
    count = lambda name, **labels: metric_total(metrics, name, **labels)  # noqa: E731
    assert count("gpupair_extender_requests_total", verb=EVERY_POD_VERB, outcome="ok") == 3
    assert count("gpupair_extender_requests_total", verb="prioritize", outcome="ok") == 3
    assert count("gpupair_extender_decisions_total", verb=EVERY_POD_VERB, outcome="scored") == 6
    assert count("gpupair_extender_request_seconds_count", verb=EVERY_POD_VERB) == 3
    assert count("gpupair_extender_answer_cpu_seconds_count", verb=EVERY_POD_VERB) == 3
    assert count("gpupair_extender_answer_cpu_seconds_sum", verb=EVERY_POD_VERB) > 0


async def test_a_body_it_cannot_decode_is_answered_in_prioritizes_error_shape():
    extender = make_extender()
    async with serving(extender) as client:
        status, answer = await client.post(EVERY_POD_VERB, b'{"Pod": {}, "NodeNames": "n1"')
        _, metrics = await client.get("/metrics")
    assert status == 400 and set(answer) == {"Error"} and answer["Error"]
    assert metric_total(metrics, "gpupair_extender_requests_total", verb=EVERY_POD_VERB, outcome="bad_request") == 1
