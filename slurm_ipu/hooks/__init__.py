"""The Slurm controller hooks and their state: PrologSlurmctld (`prolog`), EpilogSlurmctld
(`epilog`), the removal service (`removal`), `reap`, the job's context from Slurm's environment
(`jobenv`), the creation records (`ledger`), the removal journal (`journal`) and the hooks' log
(`hooklog`). They reach V-IPU only through the V-IPU client."""
