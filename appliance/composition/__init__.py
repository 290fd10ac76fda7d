"""The one composition root: `wire` builds the store, the Context, the backend (chosen from the
registry in backends.py), every use case once, and the loops; `serve` (server/app.py) and
`simulate` (simulation/runner.py) both run what it builds. office.py runs leader election over
it."""

from appliance.composition.backends import BACKENDS, StartupError, election
from appliance.composition.office import Office
from appliance.composition.root import Parts, Runtime, wire

__all__ = ["BACKENDS", "Office", "Parts", "Runtime", "StartupError", "election", "wire"]
