"""What the user gives: the scenario (the only reader of scenario files), a DeepSpeed config, a
measured profile, the hardware catalogue and the cluster's graph.

Imports nothing of ppsim but errors, formats and the schedule registry (ppsim.plan.schedules:
the default schedule is the registry's).
"""
