"""The audit: reading captures, the response formats and their detection, the verdict on one
record, the per-record rows and the check of many files (``tokenwire check``, ``tokenwire.audit``,
``tokenwire.ray``)."""
