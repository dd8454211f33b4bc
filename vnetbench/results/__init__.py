"""Results: the store, the data loader, statistics, guards on a trial's numbers, verdicts on a study's claims, CPU
profiles and efficiency, export."""
