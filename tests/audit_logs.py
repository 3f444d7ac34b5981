"""Audit pod logs built from the recorded `nvidia-smi topo -m` fixtures.

A pod granted host GPUs {4, 6} sees, inside its container, only those two: nvidia-smi numbers them
GPU0 and GPU1 (in PCI order) in both the --query-gpu CSV and the topo matrix, and the matrix keeps
the host's NIC columns and the rows' CPU/NUMA affinity. ``container_log`` renders that view from a
host fixture, in nvidia-smi's own layout (tab-separated cells, `` X `` on the diagonal, Legend).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpupair.topology.layout import NodeLayout
from gpupair.topology.smi_topo import SmiTopology, parse_topo_matrix

FIXTURES = Path(__file__).parent / "fixtures" / "topo"
# The seed's example bus map: GPU0-3 on NUMA 0, GPU4-7 on NUMA 1.
SEED_PCI = ("21", "31", "41", "61", "81", "A1", "C1", "E1")

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def host_topology(name: str) -> SmiTopology:
    return parse_topo_matrix(fixture(name))


def pci_of(host_index: int, count: int) -> str:
    """A host GPU's PCI bus id: the seed's map on 8-GPU nodes, a made-up one elsewhere."""
    bus = SEED_PCI[host_index] if count == len(SEED_PCI) else f"{0x18 + 0x10 * host_index:02X}"
    return f"00000000:{bus}:00.0"


def uuid_of(host_index: int) -> str:
    return f"GPU-{host_index:08x}-5d1e-4c2b-9a3f-{0xA0000000 + host_index:012x}"


def host_layout(name: str) -> NodeLayout:
    """The node's layout as the reporter would publish it: the fixture's links and NUMA, with PCI."""
    layout = host_topology(name).to_layout()
    devices = tuple(
        replace(d, uuid=uuid_of(d.index), pci_bus_id=pci_of(d.index, layout.size)) for d in layout.devices
    )
    return NodeLayout(devices=devices, links=layout.links)


def query_csv(host_indices: list[int], count: int, header: bool = True) -> str:
    lines = ["index, uuid, pci.bus_id"] if header else []
    for local, host in enumerate(sorted(host_indices)):
        lines.append(f"{local}, {uuid_of(host)}, {pci_of(host, count)}")
    return "\n".join(lines) + "\n"


def _cell(label: str) -> str:
    return " X " if label == "X" else label


def _printed_rows(text: str, topo: SmiTopology) -> dict[str, list[str]]:
    """The host matrix's rows, cells as printed (SOC stays SOC; NIC-NIC cells are kept too)."""
    rows = {}
    for line in text.splitlines():
        tokens = line.split()
        if tokens and tokens[0] in topo.gpus + topo.nics and "X" in tokens and tokens[0] not in rows:
            rows[tokens[0]] = tokens[1:]
    return rows


def container_topo(text: str, host_indices: list[int]) -> str:
    """`nvidia-smi topo -m` as a container granted ``host_indices`` prints it, from host output ``text``."""
    topo = parse_topo_matrix(text)
    printed = _printed_rows(text, topo)
    granted = sorted(host_indices)
    names = [f"GPU{i}" for i in range(len(granted))] + list(topo.nics)
    attributes = [
        column for column, values in (("CPU Affinity", topo.cpu_affinity),
                                      ("NUMA Affinity", topo.numa_affinity),
                                      ("GPU NUMA ID", topo.gpu_numa_id))
        if any(v is not None for v in values)
    ]
    lines = ["\t" + "\t".join(names + attributes)]
    for local, host in enumerate(granted):
        row = printed[f"GPU{host}"]
        cells = [_cell(row[other]) for other in granted]
        cells += row[len(topo.gpus):len(topo.gpus) + len(topo.nics)]
        values = {"CPU Affinity": topo.cpu_affinity[host], "NUMA Affinity": topo.numa_affinity[host],
                  "GPU NUMA ID": topo.gpu_numa_id[host]}
        cells += [values[column] or "N/A" for column in attributes]
        lines.append(f"GPU{local}\t" + "\t".join(cells))
    for n, nic in enumerate(topo.nics):
        row = printed[nic]
        cells = [row[host] for host in granted] + [_cell(c) for c in row[len(topo.gpus):]]
        lines.append(f"{nic}\t" + "\t".join(cells))
    text = "\n".join(lines) + "\n" + LEGEND
    if topo.nic_legend:
        text += "\nNIC Legend:\n\n" + "".join(f"  {nic}: {dev}\n" for nic, dev in topo.nic_legend.items())
    return text


def container_log(name: str, host_indices: list[int]) -> str:
    """The whole pod log: the CSV, then topo -m, as the audit pod's script prints them."""
    text = fixture(name)
    return query_csv(host_indices, len(parse_topo_matrix(text).gpus)) + container_topo(text, host_indices)
