"""Models of the scheduler that the scenarios run: kube-scheduler's filter and resource scoring,
its default preemption and DynamicResources' allocator, each with or without gpupair's extender
and its preempt verb (which decide with gpupair.decide, as the extender does)."""
