"""For tests, benchmarks and the docs only, outside the library: each stage run outside the workflow,
from Python or as its script; simulated reads; measurement; config/README.md's reference generated
from the schema. Nothing in workflow_lib imports it."""
