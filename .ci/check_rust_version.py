#!/usr/bin/env python3
"""The declared rust-version is true: no dependency a user builds needs a newer Rust.

Reads `cargo metadata --format-version 1 --all-features` (the resolved graph,
every platform) and walks it from the root crate along normal and build
dependency edges only: dev-dependencies are built for the crate's own tests,
benches and examples, never for a user. Fails listing each dependency reached
whose own `rust-version` is greater than the crate's.

Usage: python3 .ci/check_rust_version.py [--manifest-path PATH]
"""

import json
import subprocess
import sys


def show(version):
    """(1, 89, 0) -> '1.89'; (1, 89, 1) -> '1.89.1'."""
    return ".".join(map(str, version[:2] if version[2] == 0 else version))


def parse(version):
    """'1.85' / '1.85.0' -> (1, 85, 0)."""
    parts = [int(part) for part in version.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def main(argv):
    command = ["cargo", "metadata", "--format-version", "1", "--all-features", *argv]
    metadata = json.loads(subprocess.run(command, check=True, stdout=subprocess.PIPE).stdout)

    packages = {package["id"]: package for package in metadata["packages"]}
    nodes = {node["id"]: node for node in metadata["resolve"]["nodes"]}
    root_id = metadata["resolve"]["root"]
    if root_id is None:
        sys.exit("check_rust_version: no root package (run it in the crate, not a virtual workspace)")
    root = packages[root_id]
    if not root["rust_version"]:
        sys.exit(f"check_rust_version: {root['name']} declares no rust-version")
    declared = parse(root["rust_version"])

    # Reachable from the root through normal (kind null) and build edges.
    reached, todo = set(), [root_id]
    while todo:
        for dep in nodes[todo.pop()]["deps"]:
            if dep["pkg"] in reached:
                continue
            if any(kind["kind"] in (None, "build") for kind in dep["dep_kinds"]):
                reached.add(dep["pkg"])
                todo.append(dep["pkg"])

    needed = sorted(
        (parse(packages[pkg]["rust_version"]), packages[pkg]["name"], packages[pkg]["version"])
        for pkg in reached
        if packages[pkg]["rust_version"]
    )
    newer = [entry for entry in needed if entry[0] > declared]
    highest = needed[-1] if needed else None

    if newer:
        print(
            f"check_rust_version: {root['name']} declares rust-version {root['rust_version']}, "
            f"but {len(newer)} of its {len(reached)} normal/build dependencies need a newer Rust:"
        )
        for version, name, pkg_version in newer:
            print(f"  {name} {pkg_version}: rust-version {show(version)}")
        print(f"set rust-version in Cargo.toml to at least {show(newer[-1][0])}")
        return 1
    top = ", ".join(f"{name} {version}" for need, name, version in needed if highest and need == highest[0])
    print(
        f"check_rust_version: {root['name']} rust-version {root['rust_version']} covers its "
        f"{len(reached)} normal/build dependencies"
        + (f" (the highest, {show(highest[0])}: {top})" if highest else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
