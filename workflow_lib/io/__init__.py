"""Files: sequence files, tables and JSON, outputs written atomically, the HDF5 embedding store,
checksums, locks, shard files.

May import: cli."""
