import pytest

from gpupair.decide.judge import verdict
from gpupair.decide.pod.intent import Intent
from gpupair.simulator.shapes import seed_layout


def test_seed_pass_row():
    v = verdict.classify(seed_layout(), (1, 0))
    assert v.tsv_row("01", "test-01-1", "Succeeded") == (
        "01\ttest-01-1\tSucceeded\tGPU0+GPU1\t00000000:21:00.0+00000000:31:00.0\tNUMA0+NUMA0\tNODE\tPASS"
    )
    # NODE is not peer access: the seed's nodes answered cudaDeviceCanAccessPeer = 0.
    assert v.p2p == "not-supported"


def test_cross_numa_pair_fails_with_sys():
    annotations = verdict.classify(seed_layout(), (3, 4), planned=(1, 2)).annotations()
    assert annotations == {
        "gpupair.io/granted": "GPU3+GPU4",
        "gpupair.io/pci": "00000000:61:00.0+00000000:81:00.0",
        "gpupair.io/numa": "NUMA0+NUMA1",
        "gpupair.io/link": "SYS",
        "gpupair.io/p2p": "not-supported",
        "gpupair.io/verdict": "FAIL",
        "gpupair.io/plan-match": "false",
        "gpupair.io/verdict-placement": "required",
    }


def test_four_gpu_set_and_set_parsing():
    v = verdict.classify(seed_layout(), (4, 5, 6, 7), planned=(4, 5, 6, 7))
    assert (v.granted, v.link, v.result, v.plan_match) == ("GPU4+GPU5+GPU6+GPU7", "NODE", "PASS", "true")
    assert verdict.parse_set(v.granted) == (4, 5, 6, 7)


@pytest.mark.parametrize("intent, spread_result", [
    (Intent.REQUIRED, "FAIL"), (Intent.PREFERRED, "PASS"), (Intent.NONE, "PASS")])
def test_the_verdict_judges_a_grant_against_what_the_pod_asked(intent, spread_result):
    """A close grant passes under every intent; a SYS grant fails only where it was required."""
    close = verdict.classify(seed_layout(), (0, 1), intent=intent)
    spread = verdict.classify(seed_layout(), (3, 4), intent=intent)
    assert (close.result, close.close) == ("PASS", True)
    assert (spread.result, spread.close, spread.link) == (spread_result, False, "SYS")
    for v in (close, spread):
        assert v.annotations()[verdict.VERDICT_PLACEMENT_KEY] == intent.value
