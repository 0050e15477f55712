#!/usr/bin/env python3
"""Extract every top-level config key accepted by Axolotl's pydantic schema.

Reads src/axolotl/utils/schemas/**/*.py at a git revision (via `git show`),
parses with `ast` (no import of axolotl), resolves the bases of
AxolotlInputConfig (recursively, C3-style left-to-right as pydantic does),
and writes a JSON object:

  {"revision": ..., "commit": ..., "version": ..., "root_class": ...,
   "keys": {name: {"type": str, "default": repr-or-null, "default_kind": ...,
                   "alias": ..., "class": ..., "file": ..., "line": int,
                   "overridden_in": [...], "description": ...}},
   "aliases": {alias: field_name},
   "mro": [...]}

Usage: extract_keys.py [REPO_GIT_DIR] REV OUT.json
"""

import ast
import json
import re
import subprocess
import sys

REPO = "/work/.mirror/axolotl-ai-cloud+axolotl/repo"
SCHEMA_DIR = "src/axolotl/utils/schemas"
ROOT = "AxolotlInputConfig"
SKIP_BASES = {"BaseModel", "object", "Enum", "str"}


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def list_files(repo, rev):
    out = git(repo, "ls-tree", "-r", "--name-only", rev, SCHEMA_DIR)
    return [p for p in out.splitlines() if p.endswith(".py")]


def literal_or_src(node, src):
    if node is None:
        return None, None
    try:
        return ast.literal_eval(node), "literal"
    except Exception:
        return ast.get_source_segment(src, node), "expr"


def field_info(value, src):
    """Return (default, default_kind, alias, description, extra) from the RHS."""
    if value is None:
        return None, "required", None, None, {}
    is_field = isinstance(value, ast.Call) and (
        (isinstance(value.func, ast.Name) and value.func.id == "Field")
        or (isinstance(value.func, ast.Attribute) and value.func.attr == "Field")
    )
    if not is_field:
        d, k = literal_or_src(value, src)
        return d, k, None, None, {}
    default, kind = None, "required"
    if value.args:
        a0 = value.args[0]
        if isinstance(a0, ast.Constant) and a0.value is Ellipsis:
            default, kind = None, "required"
        else:
            default, kind = literal_or_src(a0, src)
    alias = desc = None
    extra = {}
    for kw in value.keywords:
        if kw.arg == "default":
            if isinstance(kw.value, ast.Constant) and kw.value.value is Ellipsis:
                default, kind = None, "required"
            else:
                default, kind = literal_or_src(kw.value, src)
        elif kw.arg == "default_factory":
            default, kind = ast.get_source_segment(src, kw.value), "default_factory"
        elif kw.arg in ("alias", "validation_alias", "serialization_alias"):
            v, _ = literal_or_src(kw.value, src)
            extra[kw.arg] = v
            if kw.arg in ("alias", "validation_alias"):
                alias = v
        elif kw.arg == "description":
            desc, _ = literal_or_src(kw.value, src)
        elif kw.arg == "json_schema_extra":
            v, _ = literal_or_src(kw.value, src)
            if isinstance(v, dict) and "description" in v and desc is None:
                desc = v["description"]
        elif kw.arg in ("deprecated", "exclude"):
            v, _ = literal_or_src(kw.value, src)
            extra[kw.arg] = v
    return default, kind, alias, desc, extra


def parse_classes(repo, rev, paths=None):
    classes = {}
    for path in paths if paths is not None else list_files(repo, rev):
        src = git(repo, "show", f"{rev}:{path}")
        tree = ast.parse(src)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases = [ast.get_source_segment(src, b) for b in node.bases]
                fields = []
                for stmt in node.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                        name = stmt.target.id
                        ann = ast.get_source_segment(src, stmt.annotation)
                        # collapse multi-line annotations to one line
                        ann = re.sub(r"\s+", " ", ann).replace("[ ", "[").replace(" ]", "]")
                        ann = re.sub(r",\s*]", "]", ann)
                        if name == "model_config" or ann.startswith("ClassVar"):
                            continue
                        if name.startswith("_"):
                            continue  # private attrs are not fields
                        d, k, alias, desc, extra = field_info(stmt.value, src)
                        fields.append(
                            dict(
                                name=name,
                                type=ann,
                                default=d,
                                default_kind=k,
                                alias=alias,
                                description=desc,
                                extra=extra,
                                line=stmt.lineno,
                            )
                        )
                classes[node.name] = dict(file=path, bases=bases, fields=fields, line=node.lineno)
    return classes


def mro(classes, name):
    """C3 linearisation limited to classes defined in the schema package."""

    def lin(n):
        if n not in classes:
            return [n]
        bases = [b for b in classes[n]["bases"] if b not in SKIP_BASES]
        seqs = [lin(b) for b in bases] + [bases]
        res = [n]
        seqs = [list(s) for s in seqs if s]
        while seqs:
            for s in seqs:
                head = s[0]
                if not any(head in t[1:] for t in seqs):
                    break
            else:
                raise RuntimeError("inconsistent MRO")
            res.append(head)
            seqs = [[x for x in t if x != head] for t in seqs]
            seqs = [t for t in seqs if t]
        return res

    return lin(name)


def extract(repo, rev, root=ROOT):
    classes = parse_classes(repo, rev)
    order = mro(classes, root)
    keys = {}
    # walk from most-base to most-derived so derived definitions win
    for cls in reversed(order):
        if cls not in classes:
            continue
        info = classes[cls]
        for f in info["fields"]:
            entry = dict(
                type=f["type"],
                default=f["default"],
                default_kind=f["default_kind"],
                alias=f["alias"],
                description=f["description"],
                **({"field_extra": f["extra"]} if f["extra"] else {}),
                **{"class": cls},
                file=info["file"],
                line=f["line"],
            )
            if f["name"] in keys:
                prev = keys[f["name"]]
                entry["overrides"] = [
                    *prev.get("overrides", []),
                    f"{prev['class']} ({prev['file']}:{prev['line']}): {prev['type']}",
                ]
            keys[f["name"]] = entry
    aliases = {v["alias"]: k for k, v in keys.items() if isinstance(v["alias"], str)}
    try:
        version = git(repo, "show", f"{rev}:VERSION").strip()
    except subprocess.CalledProcessError:
        version = None
    commit = git(repo, "rev-parse", f"{rev}^{{commit}}").strip()
    plugin_keys = extract_plugin_keys(repo, rev)
    return dict(
        revision=rev,
        commit=commit,
        version_file=version,
        root_class=root,
        mro=order,
        n_keys=len(keys),
        keys=dict(sorted(keys.items())),
        aliases=aliases,
        plugin_keys_note=(
            "Keys below are NOT in AxolotlInputConfig itself: they are merged in at runtime "
            "by axolotl.integrations.config.merge_input_args() only when the plugin is listed "
            "under `plugins:` (class returned by the plugin's get_input_args())."
        ),
        plugin_keys=plugin_keys,
    )


def extract_plugin_keys(repo, rev):
    """Fields of the pydantic arg classes that plugins add via get_input_args()."""
    out = git(repo, "ls-tree", "-r", "--name-only", rev, "src/axolotl/integrations")
    paths = [p for p in out.splitlines() if p.endswith("args.py")]
    classes = parse_classes(repo, rev, paths)
    result = {}
    for cname, info in classes.items():
        if not cname.endswith(("Args", "Config")):
            continue
        for f in info["fields"]:
            result.setdefault(f["name"], []).append(
                dict(
                    type=f["type"],
                    default=f["default"],
                    default_kind=f["default_kind"],
                    alias=f["alias"],
                    description=f["description"],
                    **{"class": cname},
                    file=info["file"],
                    line=f["line"],
                )
            )
    return dict(sorted(result.items()))


def main(argv):
    if len(argv) == 3:
        repo, rev, out = REPO, argv[1], argv[2]
    elif len(argv) == 4:
        repo, rev, out = argv[1:]
    else:
        print(__doc__)
        return 2
    res = extract(repo, rev)
    with open(out, "w") as fh:
        json.dump(res, fh, indent=1, default=str)
    print(f"{rev} {res['commit'][:10]} version={res['version_file']} keys={res['n_keys']} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
