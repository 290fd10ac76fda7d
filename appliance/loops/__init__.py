"""The loops that apply decisions: scheduling (admission's decisions onto the store and the
backend) and reconciling (what the backend reports onto job phases). They call the services;
the pure decisions live in appliance.scheduler."""
