"""The scenarios `gpupair simulate --scenario` runs on the simulated cluster: seed (the field
report's rounds), fleet (many nodes over time), fragmentation (small pods, then large ones) and
replay (a recorded cluster state, pod by pod). The trace scenario has its own package,
simulator/trace/."""
