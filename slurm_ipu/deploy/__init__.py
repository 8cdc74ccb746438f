"""Deployment: a site description (site.py) rendered into the fragments a site merges into its
own Slurm configuration (fragments.py, from templates/)."""
