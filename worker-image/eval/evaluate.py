#!/usr/bin/env python3
"""Prompt-injection evaluation on real Debian documents (see run.sh).

  evaluate.py pick   WORK          choose the negatives into WORK/neg
  evaluate.py plant  WORK EVALDIR  plant every attack of every set into
                                   clean negatives, WORK/planted
  evaluate.py score  WORK          read the worker's reports, print figures

Nothing here is committed output: WORK is scratch space. Choices are
deterministic (sorted by a hash of the path), so reruns on the same package
versions pick the same documents.
"""
import glob
import gzip
import hashlib
import html
import json
import os
import sys

ROOTS = ["/usr/share/doc", "/usr/share/iso-codes/json", "/usr/share/distro-info"]
# per type: (file suffixes, how many at most, size cap in bytes)
QUOTAS = {
    "html": ((".html", ".htm"), 140, 300_000),
    "txt": ((".txt", ".txt.gz"), 70, 200_000),
    "md": ((".md", ".md.gz"), 70, 200_000),
    "pdf": ((".pdf", ".pdf.gz"), 20, 4_000_000),
    "json": ((".json",), 30, 300_000),
    "csv": ((".csv",), 20, 300_000),
}
SETS = ["dev", "dev2", "dev3", "heldout3"]
PLACEMENTS = [
    ("visible-html", "html"),
    ("visible-md", "md"),
    ("visible-txt", "txt"),
    ("hidden-html-style", "html"),
    ("hidden-html-class", "html"),
    ("hidden-html-comment", "html"),
    ("hidden-md-comment", "md"),
]


def key(s):
    return hashlib.sha256(s.encode()).hexdigest()


def candidates():
    """Every (kind, path) under ROOTS, symlinks followed, each file once."""
    seen = set()
    for root in ROOTS:
        for dirpath, _, files in os.walk(root, followlinks=True):
            for f in files:
                p = os.path.join(dirpath, f)
                real = os.path.realpath(p)
                if real in seen or not os.path.isfile(real):
                    continue
                for kind, (suffixes, _, _) in QUOTAS.items():
                    if f.lower().endswith(suffixes):
                        seen.add(real)
                        yield kind, p
                        break


def read(path):
    with open(path, "rb") as fh:
        data = fh.read()
    return gzip.decompress(data) if path.endswith(".gz") else data


def pick(work):
    out = os.path.join(work, "neg")
    os.makedirs(out, exist_ok=True)
    by_kind = {}
    for kind, p in candidates():
        by_kind.setdefault(kind, []).append(p)
    chosen = []
    for kind, (_, n, cap) in QUOTAS.items():
        hashes = set()
        for p in sorted(by_kind.get(kind, []), key=key):
            if sum(1 for c in chosen if c[0] == kind) >= n:
                break
            try:
                data = read(p)
            except (OSError, EOFError, gzip.BadGzipFile):
                continue
            h = key(data.hex()[:20000])
            if not 200 <= len(data) <= cap or h in hashes:
                continue
            hashes.add(h)
            chosen.append((kind, p, data))
    for i, (kind, p, data) in enumerate(chosen):
        name = f"n{i:04d}-{os.path.basename(p).removesuffix('.gz')}"
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)
    with open(os.path.join(work, "neg-sources.json"), "w") as fh:
        json.dump({f"n{i:04d}": p for i, (_, p, _) in enumerate(chosen)}, fh, indent=0)
    counts = {k: sum(1 for c in chosen if c[0] == k) for k in QUOTAS}
    print(f"negatives picked: {len(chosen)} {counts}")


def reports(out_dir):
    """path -> the per-input report of every input under out_dir."""
    index = json.load(open(os.path.join(out_dir, "index.json")))
    result = {}
    for entry in index.get("inputs", []):
        path = entry.get("path")
        if not path:
            continue
        full = None
        files = [f for f in entry.get("files") or [] if isinstance(f, str) and f.endswith(".json")]
        for cand in files + [path + ".json"]:
            if cand and os.path.exists(os.path.join(out_dir, cand)):
                full = json.load(open(os.path.join(out_dir, cand)))
                break
        result[path] = full if full is not None else entry
    return result


def injection(report):
    """The prompt_injection warnings of one report."""
    return [w for w in report.get("warnings", []) if w.get("kind") == "prompt_injection"]


def insert_middle(doc, piece, kind):
    """doc with piece inserted at a paragraph boundary near the middle."""
    mid = len(doc) // 2
    if kind == "html":
        for marker in ["</p>", "</div>", "</li>"]:
            at = doc.find(marker, mid)
            if at >= 0:
                at += len(marker)
                return doc[:at] + "\n" + piece + "\n" + doc[at:]
        at = doc.lower().rfind("</body>")
        return doc[:at] + piece + doc[at:] if at >= 0 else doc + piece
    at = doc.find("\n\n", mid)
    if at < 0:
        return doc.rstrip("\n") + "\n\n" + piece + "\n"
    return doc[: at + 2] + piece + "\n\n" + doc[at + 2 :]


def planted(doc, attack, placement):
    esc = html.escape(attack, quote=False)
    one_line = " ".join(attack.split())
    if placement == "visible-html":
        return insert_middle(doc, f"<p>{esc}</p>", "html")
    if placement in ("visible-md", "visible-txt"):
        return insert_middle(doc, attack, "md")
    if placement == "hidden-html-style":
        return insert_middle(doc, f'<p style="display:none">{esc}</p>', "html")
    if placement == "hidden-html-class":
        style = "<style>.eval-note{display:none}</style>"
        at = doc.lower().find("</head>")
        doc = doc[:at] + style + doc[at:] if at >= 0 else style + doc
        return insert_middle(doc, f'<div class="eval-note">{esc}</div>', "html")
    if placement == "hidden-html-comment":
        return insert_middle(doc, "<!-- " + attack.replace("-->", "- ->") + " -->", "html")
    if placement == "hidden-md-comment":
        # a link-reference definition never rendered; parentheses would end it
        body = one_line.replace("(", "[").replace(")", "]")
        return insert_middle(doc, f"[//]: # ({body})", "md")
    raise ValueError(placement)


def plant(work, evaldir):
    neg = reports(os.path.join(work, "out-neg"))
    clean = {"html": [], "md": [], "txt": []}
    for path, rep in sorted(neg.items()):
        if injection(rep) or rep.get("status", "ok") != "ok":
            continue
        dt = rep.get("type") or rep.get("doc_type") or ""
        ext = os.path.splitext(path)[1].lstrip(".")
        kind = {"htm": "html", "markdown": "md"}.get(ext, ext)
        if kind in clean and (dt in ("", kind, "markdown", "text", "html")):
            clean[kind].append(path)
    print("clean carriers:", {k: len(v) for k, v in clean.items()})
    out = os.path.join(work, "planted")
    os.makedirs(out, exist_ok=True)
    manifest = []
    for set_name in SETS:
        rows = [json.loads(l) for l in open(os.path.join(evaldir, f"{set_name}.jsonl"), encoding="utf-8")]
        for i, row in enumerate(rows):
            for placement, kind in PLACEMENTS:
                carriers = clean[kind]
                carrier = carriers[int(key(f"{set_name}{i}{placement}"), 16) % len(carriers)]
                doc = open(os.path.join(work, "neg", carrier), encoding="utf-8", errors="replace").read()
                name = f"{set_name}-{i:04d}-{placement}.{kind}"
                with open(os.path.join(out, name), "w", encoding="utf-8") as fh:
                    fh.write(planted(doc, row["text"], placement))
                manifest.append({"file": name, "set": set_name, "placement": placement, "carrier": carrier})
    json.dump(manifest, open(os.path.join(work, "planted.json"), "w"))
    print(f"planted documents: {len(manifest)}")


def share(n, d):
    return f"{n}/{d} = {n / d:.3f}" if d else "0/0"


def score(work):
    neg = reports(os.path.join(work, "out-neg"))
    high = [p for p, r in neg.items() if any(w.get("severity") == "high" for w in injection(r))]
    anyw = [p for p, r in neg.items() if injection(r)]
    print(f"negatives: {len(neg)} real Debian documents")
    print(f"  with a HIGH prompt_injection warning: {share(len(high), len(neg))} (target <= 0.01)")
    print(f"  with any prompt_injection warning:    {share(len(anyw), len(neg))}")
    for p in sorted(anyw):
        ws = injection(neg[p])
        top = ws[0]
        print(f"    {top.get('severity'):6} {p}: {top.get('message', '')[:110]}")
    pl = reports(os.path.join(work, "out-planted"))
    manifest = json.load(open(os.path.join(work, "planted.json")))
    table = {}
    for m in manifest:
        rep = pl.get(m["file"], {})
        ws = injection(rep)
        t = table.setdefault((m["set"], m["placement"]), [0, 0, 0])
        t[0] += 1
        t[1] += bool(ws)
        t[2] += any(w.get("severity") == "high" for w in ws)
    for set_name in SETS:
        tot = [sum(v[i] for (s, _), v in table.items() if s == set_name) for i in range(3)]
        print(f"recall {set_name}: any severity {share(tot[1], tot[0])}, high {share(tot[2], tot[0])}")
        for (s, placement), v in sorted(table.items()):
            if s == set_name:
                print(f"  {placement:20} any {share(v[1], v[0])}   high {share(v[2], v[0])}")


if __name__ == "__main__":
    cmd, work = sys.argv[1], sys.argv[2]
    if cmd == "pick":
        pick(work)
    elif cmd == "plant":
        plant(work, sys.argv[3])
    elif cmd == "score":
        score(work)
    else:
        sys.exit(f"unknown command {cmd}")
