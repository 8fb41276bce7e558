"""The writer: the server side's encoders, validated by the readers' own rules."""
