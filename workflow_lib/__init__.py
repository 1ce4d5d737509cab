"""Library behind the workflow: the logic that the rules' scripts call."""

__version__ = "0.1.0"
