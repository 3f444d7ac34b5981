"""The fragmentation score: the GPU a node's free capacity cannot give the workload
(`fragmentation`), graded over nodes (`fragmentation_grades`), by GPU product (`gpu_products`)."""
