"""Building a scenario: its topology, node by node, asked of the host backend that places it."""
