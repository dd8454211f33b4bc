"""Running a campaign: trials in order, adaptive repetitions and a card's rounds, progress, the environment record."""
