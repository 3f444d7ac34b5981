"""The judgements on a node: the extender's filter and prioritize decisions (`decisions`), its
preemption verdicts (`preemption`), what a node owes pods just bound (`reservations`), and the
verdict on a granted set (`verdict`)."""
