"""The read path's choice of implementation (the selector) and head selection over its
results."""
