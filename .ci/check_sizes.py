#!/usr/bin/env python3
"""Files of at most 400 code lines, functions of at most 60 lines.

Code lines are the lines that are neither blank nor comments (`//`,
`///`, `//!`). A function's length runs from its `fn` line to its closing
brace. Checked over the folders given (default: src/, tests/, examples/
and benches/). Exits 1 listing what is over.
"""
import pathlib
import re
import sys

FILE_LIMIT = 400
FUNCTION_LIMIT = 60
root = pathlib.Path(__file__).resolve().parent.parent
FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+\"\w+\"\s+)?fn\s+(\w+)")


def strip(line):
    """The line without its string literals and its `//` comment."""
    line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(?:\\.|[^'\\])'", "' '", line)
    return line.split("//", 1)[0]


def functions(lines):
    """(name, first line, length) of each function with a body."""
    for start, line in enumerate(lines):
        match = FN.match(line)
        if not match:
            continue
        depth, opened = 0, False
        for end in range(start, len(lines)):
            code = strip(lines[end])
            if not opened and code.rstrip().endswith(";") and "{" not in code:
                break  # a declaration without a body
            depth += code.count("{") - code.count("}")
            opened = opened or "{" in code
            if opened and depth <= 0:
                yield match.group(1), start + 1, end - start + 1
                break


problems = []
for folder in sys.argv[1:] or ("src", "tests", "examples", "benches"):
    for path in sorted((root / folder).rglob("*.rs")):
        if "target" in path.parts:
            continue
        lines = path.read_text().split("\n")
        code = [l for l in lines if l.strip() and not l.strip().startswith("//")]
        relative = path.relative_to(root)
        if len(code) > FILE_LIMIT:
            problems.append(f"  {relative}: {len(code)} code lines (limit {FILE_LIMIT})")
        for name, line, length in functions(lines):
            if length > FUNCTION_LIMIT:
                problems.append(f"  {relative}:{line}: fn {name} is {length} lines (limit {FUNCTION_LIMIT})")
if problems:
    print("over the size limits:")
    print("\n".join(problems))
    sys.exit(1)
print(f"sizes: every file within {FILE_LIMIT} code lines, every function within {FUNCTION_LIMIT} lines")
