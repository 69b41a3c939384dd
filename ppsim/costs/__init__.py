"""What every piece of a step costs: layers' FLOPs and bytes, the partition of layers into stages,
memory, collectives, and the CostTable the simulator consumes (analytic, profiled or explicit).

Imports inputs (and errors); knows no plan and no schedule.
"""

from ppsim.costs.table import CostTable, Link, StageCost
from ppsim.costs.workload import Workload, build_workload

__all__ = ["CostTable", "Link", "StageCost", "Workload", "build_workload"]
