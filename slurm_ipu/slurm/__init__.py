"""Slurm, read through its own commands (squeue --json, scontrol), behind one interface."""
