"""The experiment: the spec file, its checks against the registries, the matrix of scenarios, the study suites."""
