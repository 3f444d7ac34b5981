"""Which GPU products a pod accepts and which a node has (gpupair/decide/score/gpu_products.py): real-
looking pod specs, GFD's label form, and DRA claims' CEL selectors."""

import pytest

from gpupair.decide.score.gpu_products import (
    ANY, NO_PRODUCT, PRODUCT_LABEL, RULE, label_product, node_product, normalise, pod_accepts, selector_accepts,
)
from gpupair.decide.pod.pod_request import PodRequestError

NODES = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "Tesla-T4")


def pod(selector=None, terms=None):
    spec = {"containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    if selector is not None:
        spec["nodeSelector"] = selector
    if terms is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml", "uid": "u1"}, "spec": spec}


def expression(operator, *values, key=PRODUCT_LABEL):
    return {"key": key, "operator": operator, "values": list(values)}


CASES = [
    ("no constraint", pod(), ()),
    ("another label only", pod({"kubernetes.io/os": "linux"}), ()),
    ("nodeSelector", pod({PRODUCT_LABEL: "Tesla-T4", "kubernetes.io/os": "linux"}), ("Tesla-T4",)),
    ("affinity In", pod(terms=[{"matchExpressions": [expression("In", "NVIDIA-A100-SXM4-80GB", "Tesla-T4")]}]),
     ("NVIDIA-A100-SXM4-80GB", "Tesla-T4")),
    ("affinity NotIn takes from the nodes' products",
     pod(terms=[{"matchExpressions": [expression("NotIn", "Tesla-T4")]}]),
     ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3")),
    ("expressions of a term are ANDed",
     pod(terms=[{"matchExpressions": [expression("In", "NVIDIA-A100-SXM4-80GB", "Tesla-T4"),
                                      expression("NotIn", "Tesla-T4")]}]), ("NVIDIA-A100-SXM4-80GB",)),
    ("terms are ORed",
     pod(terms=[{"matchExpressions": [expression("In", "Tesla-T4")]},
                {"matchExpressions": [expression("In", "NVIDIA-H100-80GB-HBM3")]}]),
     ("NVIDIA-H100-80GB-HBM3", "Tesla-T4")),
    ("a term saying nothing of the product accepts any",
     pod(terms=[{"matchExpressions": [expression("In", "Tesla-T4")]},
                {"matchExpressions": [expression("In", "a", key="zone")]}]), ()),
    ("Exists says nothing of which product", pod(terms=[{"matchExpressions": [expression("Exists")]}]), ()),
    ("nodeSelector and affinity both hold",
     pod({PRODUCT_LABEL: "Tesla-T4"}, [{"matchExpressions": [expression("In", "Tesla-T4", "NVIDIA-H100-80GB-HBM3")]}]),
     ("Tesla-T4",)),
    ("nodeSelector and affinity that exclude each other accept none",
     pod({PRODUCT_LABEL: "Tesla-T4"}, [{"matchExpressions": [expression("NotIn", "Tesla-T4")]}]), (NO_PRODUCT,)),
    ("GFD's shared label is the product", pod({PRODUCT_LABEL: "Tesla-T4-SHARED"}), ("Tesla-T4",)),
]


@pytest.mark.parametrize("spec, accepted", [(p, a) for _, p, a in CASES], ids=[c[0] for c in CASES])
def test_a_pod_accepts_the_products_its_node_selection_allows(spec, accepted):
    assert pod_accepts(spec).among(NODES) == accepted


def test_a_rule_that_needs_the_nodes_products_is_keyed_apart_and_in_only_rules_are_not():
    assert pod_accepts(pod({PRODUCT_LABEL: "Tesla-T4"})).key() == ("Tesla-T4",)
    not_t4 = pod_accepts(pod(terms=[{"matchExpressions": [expression("NotIn", "Tesla-T4")]}]))
    assert not_t4.key()[0] == RULE and not_t4.key() != ANY.key() == ()


@pytest.mark.parametrize("spec, where", [
    ({"spec": {"nodeSelector": ["x"]}}, "spec.nodeSelector"),
    ({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": {"a": 1}}}}}}, "nodeSelectorTerms: must be a list"),
    ({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": PRODUCT_LABEL, "operator": "In", "values": [3]}]}]}}}}},
     "matchExpressions[0].values: must be strings"),
    ("pod", "pod must be an object"),
])
def test_a_spec_of_the_wrong_shape_is_one_clear_error(spec, where):
    with pytest.raises(PodRequestError, match=where.replace("[", r"\[").replace("]", r"\]")):
        pod_accepts(spec)


def test_nvml_names_and_gfd_labels_compare_equal():
    # GFD: the NVML name with each space a dash (k8s-device-plugin internal/lm/resource.go).
    assert normalise("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB" == normalise("NVIDIA-A100-SXM4-80GB")
    assert normalise("NVIDIA H200") == "NVIDIA-H200"
    assert normalise(None) == ""


def test_a_node_takes_its_reporters_product_else_its_label():
    node = {"metadata": {"name": "n", "labels": {PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"}}}
    assert node_product("NVIDIA H200", label_product(node)) == "NVIDIA-H200"
    assert node_product("", label_product(node)) == "NVIDIA-H100-80GB-HBM3"
    assert node_product("", label_product({"metadata": {"name": "bare"}})) == ""


DRIVER = "gpu.nvidia.com"


@pytest.mark.parametrize("cel, accepted", [
    ('device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"', ("NVIDIA-A100-SXM4-80GB",)),
    ('"NVIDIA H100 80GB HBM3" == device.attributes["gpu.nvidia.com"].productName', ("NVIDIA-H100-80GB-HBM3",)),
    ('device.attributes["gpu.nvidia.com"]["productName"] in ["Tesla T4", "NVIDIA H100 80GB HBM3"]',
     ("NVIDIA-H100-80GB-HBM3", "Tesla-T4")),
    ('device.attributes["gpu.nvidia.com"].type == "gpu"', ()),
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0', ()),
])
def test_a_claims_simple_product_selector_is_read(cel, accepted):
    found, note = selector_accepts(cel, DRIVER)
    assert found.among(NODES) == accepted and note == ""


@pytest.mark.parametrize("cel", [
    'device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA A100")',
    'device.attributes["gpu.nvidia.com"].productName == "Tesla T4" || device.attributes["gpu.nvidia.com"].productName == "x"',
    'device.attributes["other.example.com"].productName == "Tesla T4"',
])
def test_any_other_product_selector_counts_as_any_product_and_says_so(cel):
    found, note = selector_accepts(cel, DRIVER)
    assert found.among(NODES) == () and "counted as any product" in note
