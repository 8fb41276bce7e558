"""What every layer shares and which imports nothing above it: the wire constants, the JSON
reader, the errors, the result types, the wire table and the argument checks."""
