"""Hand-written code over the generated messages (appliance._proto): conversions between
messages and domain objects, and the one mapping of domain errors to gRPC status codes. Shared
by the gRPC door and the client."""
