"""The four roles a replica runs: chief (the job's training loop), cs2, memoryx, swarmx."""
