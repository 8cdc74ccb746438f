"""slurm-ipu: Graphcore IPU Pods on stock Slurm."""

__version__ = "0.1.0"
