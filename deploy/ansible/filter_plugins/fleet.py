# Filters of the uringbench playbooks: expand a plan into an ordered list of runs in batches,
# turn a host's doctor document into its facts, and turn a finished run into its record.
# Kept in Python because the scheduling (meshes, interleaved repeats, disjoint batches) is
# awkward to write in Jinja and easy to get wrong there.

import json
import math
import re

FORBIDDEN_OPTIONS = {"c", "target", "p", "port", "J", "format", "repeat", "iperf2", "iperf3", "ntttcp"}
# The other tools a run can measure against instead of `uringbench recv` (`peer:`), with
# their servers' default ports (`peer_port:` sets another).
PEERS = {"iperf2": 5001, "iperf3": 5201, "ntttcp": 5001}
DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|us|s|sec|m|min|h)?\s*$")
# Seconds past the test's own length before a run is given up (ssh, the control exchange).
MARGIN_S = 30


class PlanError(Exception):
    pass


def _seconds(text, what):
    m = DURATION.match(str(text))
    if not m:
        raise PlanError("%s: invalid duration '%s' (e.g. 10s, 500ms, 1m)" % (what, text))
    value = float(m.group(1))
    unit = m.group(2) or "s"
    return value * {"us": 1e-6, "ms": 1e-3, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}[unit]


def _argv(options, where):
    """A mapping of send options to argv: {queues: 2, udp: true, len: 64K} -> --queues 2 --udp --len 64K."""
    args = []
    for key, value in (options or {}).items():
        key = str(key)
        if key.lstrip("-") in FORBIDDEN_OPTIONS:
            raise PlanError("%s: option '%s' is set by the run role (target, port, JSON output, one run per repeat, the plan's peer)" % (where, key))
        flag = key if key.startswith("-") else ("-" + key if len(key) == 1 else "--" + key.replace("_", "-"))
        if value is True:
            args.append(flag)
        elif value is False or value is None:
            continue
        else:
            args += [flag, str(value)]
    return args


def _limit_s(options):
    get = lambda *names: next((options[n] for n in names if n in (options or {})), None)
    t = _seconds(get("time", "t") or "10s", "time")
    warm = _seconds(get("warmup") or "1s", "warmup")
    cool = _seconds(get("cooldown") or "250ms", "cooldown")
    return int(math.ceil(t + warm + cool)) + MARGIN_S


def _peer(entry, plan, where):
    """The entry's peer (None: `uringbench recv`) and the port its server listens on."""
    peer = entry.get("peer", plan.get("peer"))
    if peer in (None, "", "uringbench"):
        return None, None
    if peer not in PEERS:
        raise PlanError("%s: peer '%s' is none of %s (or uringbench)" % (where, peer, ", ".join(sorted(PEERS))))
    port = entry.get("peer_port", plan.get("peer_port", PEERS[peer]))
    if not str(port).isdigit() or not 0 < int(port) < 65536:
        raise PlanError("%s: peer_port '%s' is not a port" % (where, port))
    return peer, int(port)


def _hosts(spec, groups, where):
    """Host names from a group name, a host name, or a list of either, in inventory order."""
    items = spec if isinstance(spec, list) else [spec]
    out = []
    for item in items:
        item = str(item)
        if item in groups:
            members = groups[item]
        elif item in groups.get("all", []):
            members = [item]
        else:
            raise PlanError("%s: '%s' is neither a group nor a host of the inventory" % (where, item))
        for h in members:
            if h not in out:
                out.append(h)
    if not out:
        raise PlanError("%s: '%s' names no host" % (where, spec))
    return out


def _address(hostvars, host, kind):
    hv = hostvars[host]
    if kind == "internal":
        for name in ("internal_address", "ansible_host"):
            if name in hv and hv[name]:
                return str(hv[name]), None
        return host, None
    name = "external_address" if kind == "external" else kind
    if name in hv and hv[name]:
        return str(hv[name]), None
    return None, "%s has no inventory variable '%s' (for address '%s')" % (host, name, kind)


def fleet_runs(plan, groups, hostvars):
    """The plan's runs in execution order: [{id, seq, batch, entry, sender, receiver, address,
    target, error, repeat, args, limit_s}]. Repeat r of every pair runs before repeat r+1 of
    any (interleaving); with `parallel: true` runs go into batches whose hosts are disjoint."""
    if not isinstance(plan, dict) or not isinstance(plan.get("entries"), list) or not plan["entries"]:
        raise PlanError("fleet_plan needs a list 'entries' (see deploy/ansible/examples)")
    defaults = plan.get("options") or {}
    entries = []
    for n, e in enumerate(plan["entries"], 1):
        name = str(e.get("name") or "entry%d" % n)
        where = "fleet_plan entry '%s'" % name
        pairs = []
        if "mesh" in e:
            hosts = _hosts(e["mesh"], groups, where)
            pairs = [(s, r) for s in hosts for r in hosts if s != r]
        for p in e.get("pairs") or []:
            if isinstance(p, dict):
                senders, receivers = _hosts(p.get("from"), groups, where), _hosts(p.get("to"), groups, where)
            elif isinstance(p, list) and len(p) == 2:
                senders, receivers = _hosts(p[0], groups, where), _hosts(p[1], groups, where)
            else:
                raise PlanError("%s: a pair is [SENDER, RECEIVER] or {from: ..., to: ...}, got %r" % (where, p))
            pairs += [(s, r) for s in senders for r in receivers if s != r and (s, r) not in pairs]
        if not pairs:
            raise PlanError("%s: needs 'mesh' or 'pairs'" % where)
        options = dict(defaults)
        options.update(e.get("options") or {})
        repeats = int(e.get("repeats", plan.get("repeats", 1)))
        if repeats < 1:
            raise PlanError("%s: repeats must be at least 1" % where)
        peer, port = _peer(e, plan, where)
        args = (["--" + peer] if peer else []) + _argv(options, where)
        entries.append({"name": name, "pairs": pairs, "address": str(e.get("address", plan.get("address", "internal"))),
                        "args": args, "limit_s": _limit_s(options), "repeats": repeats, "peer": peer, "port": port})
    parallel = bool(plan.get("parallel", False))
    runs = []
    batch = 0
    for repeat in range(1, max(e["repeats"] for e in entries) + 1):
        round_batches = []  # (batch number, busy hosts)
        for e in entries:
            if repeat > e["repeats"]:
                continue
            for sender, receiver in e["pairs"]:
                target, error = _address(hostvars, receiver, e["address"])
                slot = None
                if parallel:
                    slot = next((b for b in round_batches if sender not in b[1] and receiver not in b[1]), None)
                if slot is None:
                    batch += 1
                    slot = (batch, set())
                    round_batches.append(slot)
                slot[1].update((sender, receiver))
                runs.append({"seq": len(runs) + 1, "batch": slot[0], "entry": e["name"], "sender": sender,
                             "receiver": receiver, "address": e["address"], "target": target, "error": error,
                             "repeat": repeat, "args": e["args"], "limit_s": e["limit_s"], "peer": e["peer"],
                             "port": e["port"]})
    runs.sort(key=lambda r: (r["batch"], r["seq"]))
    for n, r in enumerate(runs, 1):
        r["id"] = "%04d" % n
    return runs


def fleet_batches(runs):
    """The runs grouped by batch, in order."""
    out = []
    for r in runs:
        if not out or out[-1][0]["batch"] != r["batch"]:
            out.append([])
        out[-1].append(r)
    return out


def fleet_plan_doc(runs):
    keep = ("id", "seq", "batch", "entry", "sender", "receiver", "address", "target", "repeat", "args", "peer")
    return {"kind": "fleet-plan", "schema_version": 1, "runs": [{k: r[k] for k in keep} for r in runs]}


def fleet_host_facts(doctor, nproc, host, hostvars_host, attributes=None):
    """A host's facts for the report: what doctor saw, the CPUs its processes may use, the
    machine type and any inventory variables listed in `attributes`."""
    doc = doctor if isinstance(doctor, dict) else {}
    checks = {c.get("id"): c.get("facts") or {} for c in doc.get("checks") or [] if isinstance(c, dict)}
    host_info = doc.get("host") or {}
    iface = doc.get("interface") or {}
    facts = {
        "host": host,
        "vcpus": int(nproc) if str(nproc).strip().isdigit() else None,
        "online_cpus": host_info.get("cpus"),
        "kernel": host_info.get("kernel_release"),
        "cloud": host_info.get("cloud"),
        "interface": iface.get("name"),
        "driver": iface.get("driver"),
        "mtu": checks.get("nic.mtu", {}).get("mtu"),
        "machine_type": hostvars_host["machine_type"] if "machine_type" in hostvars_host else None,
    }
    for name in attributes or []:
        if name in hostvars_host:
            facts[name] = hostvars_host[name]
    return facts


def _one_line(text):
    return " | ".join(l.strip() for l in str(text or "").splitlines() if l.strip())


def fleet_record(run, launched, finished, sender_facts, receiver_facts):
    """The record of one run: the `send -J` document, its exit status, why it failed."""
    rec = {"kind": "fleet-run", "schema_version": 1}
    rec.update({k: run.get(k) for k in ("id", "seq", "batch", "entry", "sender", "receiver", "address", "target", "repeat", "args", "peer")})
    rec.update({"rc": None, "error": None, "document": None,
                "sender_facts": sender_facts or {}, "receiver_facts": receiver_facts or {}})
    if run.get("error"):
        rec["error"] = run["error"]
        return rec
    result = finished if finished else launched
    if not result:
        rec["error"] = "the run was not started"
        return rec
    if result.get("unreachable"):
        rec["error"] = "%s unreachable: %s" % (run["sender"], _one_line(result.get("msg")))
        return rec
    rec["rc"] = result.get("rc")
    stdout = result.get("stdout") or ""
    try:
        doc = json.loads(stdout) if stdout.strip() else None
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        rec["document"] = doc
    if result.get("msg") and "Timeout exceeded" in str(result.get("msg")):
        rec["error"] = "no result within %d s: the run was stopped" % run["limit_s"]
    elif rec["rc"] != 0:
        rec["error"] = _one_line(result.get("stderr")) or _one_line(result.get("msg")) or "send exited with %s" % rec["rc"]
    return rec


def _facts_of(hostvars, host):
    """The facts the facts role gathered, or what the inventory says of a host it could not reach."""
    hv = hostvars[host]
    if "uringbench_host_facts" in hv and hv["uringbench_host_facts"]:
        return dict(hv["uringbench_host_facts"])
    return {"host": host, "reachable": False,
            "machine_type": hv["machine_type"] if "machine_type" in hv else None}


def fleet_records(batch, launched, finished, hostvars):
    """Records of a batch: `launched` and `finished` are the registered loop results of the
    start and wait tasks."""
    by_id_launch = {r["item"]["id"]: r for r in (launched or {}).get("results", []) if "item" in r}
    by_id_done = {r["item"]["item"]["id"]: r for r in (finished or {}).get("results", [])
                  if isinstance(r.get("item"), dict) and "item" in r["item"]}
    return [fleet_record(run, by_id_launch.get(run["id"]), by_id_done.get(run["id"]),
                         _facts_of(hostvars, run["sender"]), _facts_of(hostvars, run["receiver"])) for run in batch]


class FilterModule(object):
    def filters(self):
        def wrap(f):
            def call(*a, **k):
                try:
                    return f(*a, **k)
                except PlanError as e:
                    from ansible.errors import AnsibleFilterError
                    raise AnsibleFilterError(str(e))
            return call
        return {
            "fleet_runs": wrap(fleet_runs),
            "fleet_batches": fleet_batches,
            "fleet_plan_doc": fleet_plan_doc,
            "fleet_host_facts": fleet_host_facts,
            "fleet_records": fleet_records,
        }
