"""Fail on valgrind errors whose stack passes through tokenwire's own code; CPython's own
start-up noise (its allocator, the import system) is not ours to fix."""

import re
import sys

text = open(sys.argv[1]).read()
blocks = re.split(r"\n==\d+== \n", text)
ours = [b for b in blocks if re.search(r"==\d+==\s+(Invalid|Conditional|Use of uninit|Syscall|Mismatched|Source and destination)", b)
        and re.search(r"(tw_|_core\.c|tokenwire)", b)]
for block in ours:
    print(block)
print(f"memcheck: {len(ours)} error(s) in tokenwire's code")
sys.exit(1 if ours else 0)
