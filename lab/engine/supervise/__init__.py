"""A local run's supervisor: the child's process group, status.json, device samples, diagnoses,
linked events."""
