"""The emulated replicas of a wsjob: chief, cs2, memoryx and swarmx, and their data plane.

Run one replica with `python -m appliance.workers <role> --job-id ... --replica ... --coordinator
HOST:PORT`; see appliance.workers.runtime for the protocol and appliance.workers.lifecycle for
the exit codes.
"""
