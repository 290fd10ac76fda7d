"""The web door: the dashboard at `/`, server-rendered pages over the same use cases as REST."""
