"""The Slurm controller hooks and their state: PrologSlurmctld (`prolog`), EpilogSlurmctld
(`epilog`), the rule that removes ended jobs' partitions (`removal`), the slurm-ipu service that runs
both hooks warm and removes partitions (`service`), the program Slurm runs as both hooks and its
way into the service (`transport`; the program is spank/hook/hook.c), `reap`, the job's context from Slurm's environment
(`jobenv`), the creation records (`ledger`), the removal journal (`journal`) and the hooks' log
(`hooklog`). They reach V-IPU only through the V-IPU client."""
