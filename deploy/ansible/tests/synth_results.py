# A results folder of N runs made from one real run record, for measuring `uringbench report
# --fleet` at scale (docs/fleet.md): python3 synth_results.py RECORD.json N HOSTS OUT_DIR.
# Writes OUT_DIR/plan.json and OUT_DIR/runs/ID.json; the runs are the rounds of a
# tournament over HOSTS hosts (both directions), repeated until there are N; every record
# carries the template's document with its own id, hosts and facts.
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "filter_plugins"))
import fleet  # noqa: E402

template_path, n, hosts, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
template = json.load(open(template_path))
names = ["vm%04d" % i for i in range(hosts)]
pairs = [p for rnd in fleet.circle_rounds(names) for p in (rnd + [(r, s) for s, r in rnd])]
os.makedirs(os.path.join(out, "runs"), exist_ok=True)
width = max(4, len(str(n)))
planned = []
for i in range(n):
    s, r = pairs[i % len(pairs)]
    rid = "%0*d" % (width, i + 1)
    run = {"id": rid, "seq": i + 1, "batch": i // (hosts // 2) + 1, "entry": "tournament", "sender": s, "receiver": r,
           "address": "internal", "target": "10.0.%d.%d" % (i % 250, i % 200), "repeat": i // len(pairs) + 1,
           "args": ["--time", "30s"], "peer": None}
    planned.append(run)
    rec = dict(template)
    rec.update({k: run[k] for k in ("id", "seq", "batch", "entry", "sender", "receiver", "address", "target", "repeat")})
    rec["sender_facts"] = dict(template["sender_facts"], host=s)
    rec["receiver_facts"] = dict(template["receiver_facts"], host=r)
    with open(os.path.join(out, "runs", rid + ".json"), "w") as f:
        json.dump(rec, f)
with open(os.path.join(out, "plan.json"), "w") as f:
    json.dump({"kind": "fleet-plan", "schema_version": 1, "runs": planned}, f)
