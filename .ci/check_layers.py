#!/usr/bin/env python3
"""No module imports one above it in the layer order of ARCHITECTURE.md.

The order is the numbered list under "## Layers and imports": each line
names, in backticks, the top-level modules of one layer (bottom first). A
module may use its own layer and the layers below. Every `crate::name`
path in a module's code (not its comments, not its tests) is checked; a
name the crate root re-exports (`crate::Object`, `crate::memory`) counts
as the module it comes from. Exits 1 listing each import that points up.
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
src = root / "src"

section = re.search(r"^## Layers and imports\n(.*?)^## ", (root / "ARCHITECTURE.md").read_text(), re.M | re.S)
if not section:
    sys.exit("ARCHITECTURE.md has no '## Layers and imports' section")
layer_of = {}
for number, line in re.findall(r"^(\d+)\. (.*)$", section.group(1), re.M):
    for name in re.findall(r"`([a-z_]+)(?:/|\.rs)?`", line):
        layer_of[name] = int(number)
if not layer_of:
    sys.exit("ARCHITECTURE.md lists no layers")

# What the crate root re-exports, by the module it comes from.
lib = (src / "lib.rs").read_text()
origin = {}
for module, rest in re.findall(r"pub use (\w+)::([^;]*);", lib, re.S):
    rest = rest.strip()
    items = rest[1:-1].split(",") if rest.startswith("{") else [rest]
    for item in items:
        name = item.strip().split("::")[-1].split(" as ")[-1].strip()
        if name:
            origin.setdefault(name, module)


def module_of(path):
    relative = path.relative_to(src)
    return relative.parts[0].removesuffix(".rs")


def code(path):
    """The file's code up to its tests, comments blanked (lines kept)."""
    if path.name == "tests.rs" or "tests" in path.relative_to(src).parts[:-1]:
        return ""
    kept = []
    lines = path.read_text().split("\n")
    for number, line in enumerate(lines):
        if line.startswith("#[cfg(test)]") and number + 1 < len(lines) and lines[number + 1].startswith("mod "):
            if lines[number + 1].rstrip().endswith("{"):
                break  # an inline test module: the rest of the file is tests
            kept.append("")  # `mod tests;`: its file is skipped as tests.rs or a tests/ folder
            continue
        kept.append(line.split("//", 1)[0])
    return "\n".join(kept)


def used(text):
    """(line, name) of every `crate::name`, groups (`crate::{a, b}`) included."""
    for match in re.finditer(r"\bcrate::(?:\{([^}]*)\}|(\w+))", text):
        line = text.count("\n", 0, match.start()) + 1
        names = re.findall(r"(?:^|,)\s*(\w+)", match.group(1)) if match.group(1) else [match.group(2)]
        for name in names:
            yield line, name


problems = []
unknown = set()
for path in sorted(src.rglob("*.rs")):
    if path == src / "lib.rs":
        continue
    here = module_of(path)
    if here not in layer_of:
        unknown.add(here)
        continue
    for number, name in used(code(path)):
        target = origin.get(name, name)
        if target not in layer_of:
            if (src / f"{target}.rs").exists() or (src / target).is_dir():
                unknown.add(target)
            continue  # a re-exported dependency (crate::async_trait)
        if layer_of[target] > layer_of[here]:
            problems.append(f"  {path.relative_to(root)}:{number}: `{here}` (layer {layer_of[here]}) uses `crate::{name}` (`{target}`, layer {layer_of[target]})")
if unknown:
    print("modules missing from ARCHITECTURE.md's layer list:", ", ".join(sorted(unknown)))
    sys.exit(1)
if problems:
    print("imports that point up the layers of ARCHITECTURE.md:")
    print("\n".join(problems))
    sys.exit(1)
print(f"layers: {len(layer_of)} modules, no import points up")
