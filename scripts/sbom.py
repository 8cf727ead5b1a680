#!/usr/bin/env python3
"""SPDX 2.3 SBOM (JSON) of the localpv binary: every crate the binary is built from (normal and build
dependencies reachable from localpv in `cargo metadata`, read on stdin; not dev-dependencies), with its version,
license and source. Usage: cargo metadata --locked --format-version 1 | sbom.py VERSION"""
import json
import sys

version = sys.argv[1]
meta = json.load(sys.stdin)
root = meta["resolve"]["root"]
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}


def built(dep):
    return any(k["kind"] in (None, "build") for k in dep["dep_kinds"])


reached, todo = set(), [root]
while todo:
    pid = todo.pop()
    if pid not in reached:
        reached.add(pid)
        todo.extend(d["pkg"] for d in nodes[pid]["deps"] if built(d))
ids = {}
packages = []
for p in sorted((p for p in meta["packages"] if p["id"] in reached), key=lambda p: (p["name"], p["version"])):
    spdx = "SPDXRef-Crate-%s-%s" % (p["name"], p["version"].replace("+", "-"))
    ids[p["id"]] = spdx
    packages.append({
        "SPDXID": spdx,
        "name": p["name"],
        "versionInfo": p["version"],
        "downloadLocation": "https://crates.io/crates/%s/%s" % (p["name"], p["version"])
        if (p.get("source") or "").startswith("registry+") else "NOASSERTION",
        "licenseDeclared": p.get("license") or "NOASSERTION",
        "filesAnalyzed": False,
        "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                          "referenceLocator": "pkg:cargo/%s@%s" % (p["name"], p["version"])}],
    })
relationships = [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                  "relatedSpdxElement": ids[root]}]
for pid in sorted(reached):
    for dep in filter(built, nodes[pid]["deps"]):
        relationships.append({"spdxElementId": ids[pid], "relationshipType": "DEPENDS_ON",
                              "relatedSpdxElement": ids[dep["pkg"]]})
json.dump({
    "spdxVersion": "SPDX-2.3",
    "dataLicense": "CC0-1.0",
    "SPDXID": "SPDXRef-DOCUMENT",
    "name": "localpv-%s" % version,
    "documentNamespace": "https://github.com/localpv/localpv/sbom/%s" % version,
    "creationInfo": {"created": "1970-01-01T00:00:00Z", "creators": ["Tool: localpv scripts/sbom.py"]},
    "packages": packages,
    "relationships": relationships,
}, sys.stdout, indent=1, sort_keys=True)
sys.stdout.write("\n")
