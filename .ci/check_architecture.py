#!/usr/bin/env python3
"""Every name written in backticks in ARCHITECTURE.md exists in the tree.

A backticked path (with a `/` or ending in `.rs`) must be a file or folder
of the tree (a bare file name or a tail of a path: anywhere in it); a backticked Rust name
(`Owned`, `Owned::claim`, `Controller::run_in()`) must appear, each of its
`::` segments as a whole word, in the sources (src/, tests/, benches/,
examples/). Anything else in backticks (shell commands, expressions) is
not checked. Exits 1 listing what is missing.
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
text = (root / "ARCHITECTURE.md").read_text()
words = set()
paths = set()
for folder in ("src", "tests", "benches", "examples", ".ci"):
    for path in (root / folder).rglob("*"):
        relative = path.relative_to(root).as_posix()
        paths.add(relative + ("/" if path.is_dir() else ""))
        if path.suffix == ".rs":
            words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path.read_text()))
for child in root.iterdir():
    paths.add(child.name + ("/" if child.is_dir() else ""))


def is_path(token):
    """A file or folder of the tree: from the root, from src/, or (a bare
    name or a tail) anywhere in it."""
    return any(p in (token, token + "/") or p.endswith(("/" + token, "/" + token + "/")) for p in paths)

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*(\(\))?!?$")
PATH = re.compile(r"^[A-Za-z0-9_./-]+$")
missing = []
for token in sorted(set(re.findall(r"`([^`\n]+)`", text))):
    if token.startswith(("/", "..")):
        continue  # an HTTP path, or a file outside the repository
    if PATH.match(token) and (token.endswith(".rs") or "/" in token):
        if "/" in token and "." in token and not token.endswith(".rs"):
            continue  # an API group, a URL
        if not is_path(token):
            missing.append(token)
    elif NAME.match(token):
        segments = token.rstrip("!").removesuffix("()").split("::")
        if not all(segment in words for segment in segments):
            missing.append(token)
if missing:
    print("ARCHITECTURE.md names what the tree does not have:")
    for token in missing:
        print(f"  `{token}`")
    sys.exit(1)
print(f"ARCHITECTURE.md: every backticked name exists")
