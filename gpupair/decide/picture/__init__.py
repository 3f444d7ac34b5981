"""Where a node's state comes from: one picture (`node_picture`) over its sources, each giving a
node's report entry with its decisions memoised (`node_entries`): the reporter's annotations, or a
DRA driver's slices and claims (`dra_source`, built by `dra_picture`)."""
