"""Plain data: a sample, units, a scenario, the strict model every user input shares, the bounded YAML reader and
the plug-in registry. Imports nothing else of vnetbench."""
