"""The performance model that picks the process grid.

The layer graph, kernel and communication costs, profiles, calibration on this
machine and the plan it recommends.
"""
