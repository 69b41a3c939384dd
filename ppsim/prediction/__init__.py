"""The one path from a scenario to a prediction: costs, the schedule's plan (``auto``'s search
included), lowering, simulation, the Trace. Imports inputs, costs, plan, sim and trace."""

from ppsim.prediction.path import (
    Built,
    Prediction,
    build,
    lower_built,
    predict,
    scenario_workload,
    stage_to_rank,
    workload_meta,
)

__all__ = ["Built", "Prediction", "build", "lower_built", "predict", "scenario_workload", "stage_to_rank",
           "workload_meta"]
