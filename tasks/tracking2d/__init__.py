"""View-agnostic 2D tracking task (paper 3.2-3.3): engine-free observations, rewards,
terminations and adaptive state initialisation."""
