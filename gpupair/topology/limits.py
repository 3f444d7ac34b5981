"""The largest inputs gpupair accepts, stated once (docs/cli.md, "Bounds").

- ``MAX_GPUS``: GPUs on one node, for every reader of a layout (the reporter, the extender's
  report decoder, simulate and verify). The device plugin's best-effort policy scores every
  partition of a node's free GPUs; gpupair's model of it (gpupair.decide.devices.policies) finds the same
  answer by a pruned, memoised search whose cold worst case on 16 free GPUs is about 2 s (a 5-
  or 6-GPU pod; 2, 4 and 8 GPUs: milliseconds) and grows several-fold per two GPUs more
  (bench/placement.py reports it). 16 is the largest GPU node sold as one system (HGX-2, DGX-2).
- ``MAX_NODES``: simulated nodes (``simulate --nodes``). A fleet's time grows with nodes x steps:
  1,000 nodes and 100 steps took 42 s for one configuration on a loaded core (~40 MB), so the
  default 400 steps take about 3 minutes per configuration; 5,000 nodes took over 10.
"""

MAX_GPUS = 16
MAX_NODES = 1000
