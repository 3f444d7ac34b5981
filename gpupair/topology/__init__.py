"""The node's GPU topology as plain data and its parsers: the layout and its link classes,
`nvidia-smi topo -m` text, topology files, NICs, the node report annotations and their limits.
Pure: it may import gpupair.kubewire, never gpupair.decide (decisions stand on topology, not the
other way round) and nothing that does network I/O."""
