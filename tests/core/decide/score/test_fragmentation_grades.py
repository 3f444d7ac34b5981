"""gpupair's grades over node rows (gpupair/decide/score/fragmentation_grades.py): best fit by CPU
and memory for a pod of several whole GPUs, among nodes that fragment alike."""

import numpy as np

from gpupair.decide.score.fragmentation import MAX_SCORE, QUANTUM, Fragmentation
from gpupair.decide.score.fragmentation_grades import BEST_FIT, UNKNOWN_MEMORY, NodeRows, fragmentation_grades, most_left

EIGHT = np.full((2, 8), 1000)


def rows(cpu_left, memory_left, after):
    # two 8-GPU boards alike in GPUs: the openb fleet's G2 (96 cores, 384 GiB) and G3 (128, 768)
    return NodeRows(cpu_left=np.array(cpu_left), before=EIGHT, after=after, model=np.zeros(2, dtype=np.int64),
                    capacity=np.full(2, 8000), whole_fits=lambda k, placed: np.array([not placed] * 2),
                    memory_left=None if memory_left is None else np.array(memory_left))


def test_a_pod_of_eight_gpus_goes_to_the_board_it_leaves_with_the_least_cpu_and_memory():
    workload = [((64000, 1000, 8, (), 262144), 0.5), ((8000, 1000, 1, (), 32768), 0.5)]
    measure = Fragmentation(workload, [""])
    g2_g3 = rows([96000, 128000], [393216, 786432], np.zeros((2, 8), dtype=np.int64))
    scores = fragmentation_grades(measure, g2_g3, 64000, 262144)
    # the board goes whole either way, so only the CPU and memory it leaves tell them apart: the
    # G2 keeps 32 of the G3's 64 cores left and 128 of its 512 GiB
    g2 = (32 / 64 + 128 / 512) / 2
    assert scores.tolist() == [MAX_SCORE, MAX_SCORE - int(np.ceil(BEST_FIT * (1 - g2) / QUANTUM - 1e-9))]


def test_a_pod_of_one_gpu_is_not_held_to_best_fit():
    measure = Fragmentation([((8000, 1000, 1, (), 32768), 1.0)], [""])
    one_taken = np.array([[0] + [1000] * 7] * 2)
    scores = fragmentation_grades(measure, rows([96000, 128000], [393216, 786432], one_taken), 8000, 32768)
    assert scores[0] == scores[1]


def test_most_left_is_each_row_over_the_most_and_counts_cpu_alone_where_memory_is_unknown():
    left = most_left(rows([16000, 32000], [65536, 131072], EIGHT), 0, 0)
    assert left.tolist() == [0.5, 1.0]
    unknown = most_left(rows([16000, 32000], [65536, UNKNOWN_MEMORY], EIGHT), 0, 0)
    assert unknown.tolist() == [0.75, 1.0]  # the first: CPU 0.5, memory 1.0 (the most known)
    assert most_left(rows([16000, 32000], None, EIGHT), 0, 0).tolist() == [0.5, 1.0]
