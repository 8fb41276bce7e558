"""The batch path: many bodies on a pool of threads, and their choices as padded arrays."""
