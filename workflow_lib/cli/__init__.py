"""What every job's command line shares: its settings (one dataclass per job, also the config's
keys), one-line errors for users, logging and progress lines, CPU threads.

Imports nothing of the library: every other package may import it."""
