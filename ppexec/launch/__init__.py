"""The launcher side: prepare a run (run.json), start its ranks here or through DeepSpeed's launcher, watch and stop them.
It may import ``worker`` (the events it reads, the run spec it writes) and ``runtimes`` (to choose one), nothing else."""
