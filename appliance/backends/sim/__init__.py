"""The simulated backend: replicas that start at once and "train" on a clock, in process."""

from appliance.backends.sim.backend import SimBackend
from appliance.backends.sim.calls import ReplicaCalls
from appliance.backends.sim.failures import FailurePlan

__all__ = ["FailurePlan", "ReplicaCalls", "SimBackend"]
