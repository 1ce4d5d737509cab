"""For tests and benchmarks only, outside the library: each stage run outside the workflow, from Python
or as its script; simulated reads; measurement. Nothing in workflow_lib imports it."""
