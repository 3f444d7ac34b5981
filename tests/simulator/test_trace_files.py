"""The trace scenario's inputs: openb CSV node and pod lists, read as FGD's converter reads them,
and every bad file refused with one line naming the file and the row."""

import subprocess
import sys
from pathlib import Path

import pytest

from gpupair.simulator.trace.files import TraceFileError, read_nodes, read_pods

TRACE = Path(__file__).parents[1] / "fixtures" / "trace"


def test_the_published_files_read_with_the_counts_their_readme_gives():
    nodes = read_nodes(TRACE / "openb_node_list_gpu_node.csv")
    pods = read_pods(TRACE / "openb_pod_list_multigpu50.csv")
    assert len(nodes) == 1213 and sum(n.gpus for n in nodes) == 6212
    by_size = {k: sum(1 for n in nodes if n.gpus == k) for k in (8, 4, 2, 1)}
    assert by_size == {8: 617, 4: 54, 2: 518, 1: 24}
    assert len(pods) == 9061
    assert {k: sum(1 for p in pods if p.gpus == k) for k in (2, 4, 8)} == {2: 222, 4: 206, 8: 556}


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def test_optional_columns_gpu_spec_and_share_rules(tmp_path):
    path = write(tmp_path, "pods.csv", POD_HEADER
                 + "a,1000,512,1,460,,LS,Running,0,1,0\n"
                 + "b,2000,0,2,1000,V100M16|G2,BE,Failed,0,1,0\n"
                 + "c,3000,0,1,2000,,LS,Running,0,1,0\n"  # above a GPU: clipped to one, as FGD's converter
                 + "d,100,64,0,0,,LS,Running,0,1,0\n"
                 + "e,100,64,4,,,LS,Running,0,1,0\n")  # whole GPUs where gpu_milli is empty
    pods = {pod.name: pod for pod in read_pods(path)}
    assert pods["a"].gpu_milli == 460 and pods["a"].models == ()
    assert pods["b"].models == ("V100M16", "G2") and pods["b"].gpu_milli == 2000
    assert pods["c"].milli_per_gpu == 1000
    assert pods["d"].gpus == 0 and pods["d"].gpu_milli == 0
    assert pods["e"].gpu_milli == 4000


@pytest.mark.parametrize("body, expected", [
    ("", "empty file"),
    ("name,cpu_milli,memory_mib,num_gpu\n", "missing column(s) gpu_milli"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,priority\na,1,1,1,1000,3\n", "unknown column(s) priority"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n", "no data rows"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,1,1000\nb,x,1,1,1000\n", "row 3: cpu_milli must be a whole number"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,-5,1,1000\n", "row 2: memory_mib must not be negative"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,2,500\n", "row 2: 2 GPUs at gpu_milli 500"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,1,1000\na,1,1,1,1000\n", "row 3: pod a is listed twice"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,1\n", "row 2: 4 cells, the header has 5"),
])
def test_a_bad_pod_list_is_refused_naming_file_and_row(tmp_path, body, expected):
    path = write(tmp_path, "pods.csv", body)
    with pytest.raises(TraceFileError) as caught:
        read_pods(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert expected in str(caught.value)


def test_a_bad_node_list_is_refused_naming_file_and_row(tmp_path):
    path = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,1024,2,T4\nn2,64000,1024,99,T4\n")
    with pytest.raises(TraceFileError, match=r"row 3: 99 GPUs"):
        read_nodes(path)


def test_the_command_says_one_line_and_exits_2_on_a_bad_row(tmp_path):
    nodes = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,1024,8,G2\n")
    pods = write(tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1,1,1000\nb,1000,1,one,1000\n")
    done = subprocess.run([sys.executable, "-m", "gpupair.command.cli", "simulate", "--no-progress", "--scenario",
                           "trace", "--trace-nodes", str(nodes), "--trace-pods", str(pods), "--policies", "bestfit",
                           "--output", str(tmp_path / "out.tsv")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"gpupair simulate: error: {pods}: row 3: num_gpu must be a whole number, got 'one'"]
    assert not list(tmp_path.glob("out*.tsv"))  # nothing half-written
