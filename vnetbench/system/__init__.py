"""The process boundary: where commands run (executor, agent), what a run creates and how it is removed (ledger,
cgroup), netlink batches, each trial's raw log, idle-CPU policy. Imports only core."""
