"""For tests and benchmarks only: each stage run outside the workflow, from Python or as its
script. Nothing else in the library imports it."""
