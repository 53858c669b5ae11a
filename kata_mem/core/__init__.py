"""Core: pure values and rules. No file, socket, clock or environment is touched here.

Quantities and units, the model (frozen dataclasses), the typed request, Kubernetes
manifests as values, the planner, the shrink-safety decision, what an apply comes to
(outcomes) and what a hypervisor's reports mean. Everything else builds on this layer.
"""
