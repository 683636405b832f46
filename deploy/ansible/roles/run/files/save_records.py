# Writes a round's run records (a JSON list on stdin) as DIR/ID.json, each through a
# temporary file renamed into place, so a record is whole or absent. Any failed write exits 1.
import json
import os
import sys

out = sys.argv[1]
records = json.load(sys.stdin)
for rec in records:
    rid = str(rec["id"])
    if not rid.isdigit():
        sys.exit("save_records: run id %r is not a number" % rid)
    path = os.path.join(out, rid + ".json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
print("saved %d records" % len(records))
