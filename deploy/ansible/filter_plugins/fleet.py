# Filters of the uringbench playbooks: expand a plan into an ordered list of runs in rounds
# (batches of runs that share no host), estimate its wall time, turn a host's doctor document
# into its facts, and turn a finished run into its record. Kept in Python because the
# scheduling (meshes, tournaments, sampled plans, interleaved repeats, disjoint rounds) is
# awkward to write in Jinja and easy to get wrong there.

import json
import math
import random
import re

FORBIDDEN_OPTIONS = {"c", "target", "p", "port", "J", "format", "repeat", "iperf2", "iperf3", "ntttcp", "start_at", "start-at"}
# The other tools a run can measure against instead of `uringbench recv` (`peer:`), with
# their servers' default ports (`peer_port:` sets another).
PEERS = {"iperf2": 5001, "iperf3": 5201, "ntttcp": 5001}
DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|us|s|sec|m|min|h)?\s*$")
# Seconds past the test's own length before a run is given up (ssh, the control exchange).
MARGIN_S = 30
# A round of several runs starts together: every sender gets `send --start-at` this long after
# the controller begins launching the round, plus LEAD_PER_WAVE_S for each further wave of
# `forks` launches (the controller starts `forks` senders at a time). The plan's `start_lead`
# sets it instead (a busy controller, or slow ssh, needs more: a sender launched after its
# instant refuses to run).
START_LEAD_S = 5.0
LEAD_PER_WAVE_S = 1.5
# The controller's own time per round outside the test and the lead (launch, wait, collect,
# save), and per further wave of forks; measured on scripts/fleet-lab.sh (docs/fleet.md).
ROUND_OVERHEAD_S = 6.0
WAVE_OVERHEAD_S = 2.0
# The plan kinds that cover a group in rounds of disjoint pairs (beside mesh and pairs).
ROUND_KINDS = ("tournament", "ring", "k_random", "across")


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
    return int(math.ceil(_test_s(options))) + MARGIN_S


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


def circle_rounds(hosts):
    """Round-robin by the circle method: N-1 rounds (N even) or N rounds (N odd, one host
    sits out each round) of disjoint pairs, every unordered pair exactly once. Host 0 stays
    put while the others turn; each pair is oriented so that every host sends about as often
    as it receives."""
    ring = list(hosts) + ([None] if len(hosts) % 2 else [])
    n = len(ring)
    rounds = []
    for r in range(n - 1):
        order = [ring[0]] + [ring[1 + (i + r) % (n - 1)] for i in range(n - 1)]
        pairs = []
        for i in range(n // 2):
            a, b = order[i], order[n - 1 - i]
            if a is None or b is None:
                continue
            flip = (r % 2 == 1) if i == 0 else (i % 2 == 1)
            pairs.append((b, a) if flip else (a, b))
        rounds.append(pairs)
    return rounds


def pack_rounds(pairs):
    """Ordered pairs into rounds whose runs share no host (first fit, in the given order)."""
    rounds = []
    for s, r in pairs:
        slot = next((x for x in rounds if s not in x[1] and r not in x[1]), None)
        if slot is None:
            slot = ([], set())
            rounds.append(slot)
        slot[0].append((s, r))
        slot[1].update((s, r))
    return [x[0] for x in rounds]


def _mirrored(rounds, both):
    """With both directions, each round is followed by the same pairs the other way."""
    if not both:
        return rounds
    out = []
    for rnd in rounds:
        out += [rnd, [(r, s) for s, r in rnd]]
    return out


def _directions(e, where):
    d = str(e.get("directions", "one"))
    if d not in ("one", "both"):
        raise PlanError("%s: directions is 'one' or 'both', got '%s'" % (where, d))
    return d == "both"


def _int_in(value, low, high, what, where):
    if isinstance(value, bool) or not str(value).strip().lstrip("-").isdigit() or not low <= int(value) <= high:
        raise PlanError("%s: %s must be a whole number from %d to %d, got '%s'" % (where, what, low, high, value))
    return int(value)


def _seed(spec, where):
    if "seed" not in spec:
        raise PlanError("%s: a sampled plan needs a 'seed' (the same seed gives the same plan)" % where)
    return _int_in(spec["seed"], 0, 2 ** 63 - 1, "seed", where)


def round_plan(e, groups, where):
    """The rounds of an entry of one of ROUND_KINDS: lists of (sender, receiver)."""
    kinds = [k for k in ROUND_KINDS if k in e]
    if len(kinds) > 1 or (kinds and ("mesh" in e or "pairs" in e)):
        raise PlanError("%s: one of mesh, pairs, %s per entry" % (where, ", ".join(ROUND_KINDS)))
    kind = kinds[0]
    both = _directions(e, where)
    if kind == "tournament":
        hosts = _hosts(e["tournament"], groups, where)
        if len(hosts) < 2:
            raise PlanError("%s: a tournament needs at least 2 hosts" % where)
        return _mirrored(circle_rounds(hosts), both)
    if kind == "ring":
        hosts = _hosts(e["ring"], groups, where)
        if len(hosts) < 2:
            raise PlanError("%s: a ring needs at least 2 hosts" % where)
        pairs = [(hosts[i], hosts[(i + 1) % len(hosts)]) for i in range(len(hosts))]
        if both:
            pairs += [(r, s) for s, r in pairs]
        return pack_rounds(list(dict.fromkeys(pairs)))
    spec = e[kind]
    if not isinstance(spec, dict):
        raise PlanError("%s: %s takes a mapping (see docs/fleet.md)" % (where, kind))
    seed = _seed(spec, where)
    rng = random.Random(seed)
    if kind == "k_random":
        hosts = _hosts(spec.get("hosts"), groups, where)
        if len(hosts) < 2:
            raise PlanError("%s: k_random needs at least 2 hosts" % where)
        shuffled = list(hosts)
        rng.shuffle(shuffled)
        rounds = circle_rounds(shuffled)
        k = _int_in(spec.get("k", 1), 1, len(rounds), "k (partners per host)", where)
        return _mirrored(rounds[:k], both)
    # across: each host sends to k hosts drawn from the other groups.
    names = spec.get("groups")
    if not isinstance(names, list) or len(names) < 2:
        raise PlanError("%s: across needs 'groups', a list of at least two groups" % where)
    members = [_hosts(g, groups, where) for g in names]
    seen = {}
    for g, hosts in zip(names, members):
        for h in hosts:
            if h in seen:
                raise PlanError("%s: host '%s' is in both '%s' and '%s'" % (where, h, seen[h], g))
            seen[h] = g
    pairs = []
    for i, hosts in enumerate(members):
        others = [h for j, hs in enumerate(members) if j != i for h in hs]
        k = _int_in(spec.get("k", 1), 1, len(others), "k (partners per host)", where)
        for h in hosts:
            for partner in rng.sample(others, k):
                pairs.append((h, partner))
                if both:
                    pairs.append((partner, h))
    return pack_rounds(list(dict.fromkeys(pairs)))


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
        rounds = round_plan(e, groups, where) if any(k in e for k in ROUND_KINDS) else None
        if rounds is not None:
            pairs = [p for rnd in rounds for p in rnd]
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
            raise PlanError("%s: needs one of mesh, pairs, %s" % (where, ", ".join(ROUND_KINDS)))
        options = dict(defaults)
        options.update(e.get("options") or {})
        repeats = int(e.get("repeats", plan.get("repeats", 1)))
        if repeats < 1:
            raise PlanError("%s: repeats must be at least 1" % where)
        peer, port = _peer(e, plan, where)
        args = (["--" + peer] if peer else []) + _argv(options, where)
        entries.append({"name": name, "pairs": pairs, "rounds": rounds,
                        "address": str(e.get("address", plan.get("address", "internal"))),
                        "args": args, "limit_s": _limit_s(options), "test_s": _test_s(options), "repeats": repeats,
                        "peer": peer, "port": port})
    lead = plan.get("start_lead")
    lead_s = _seconds(lead, "start_lead") if lead is not None else None
    for e in entries:
        e["start_lead_s"] = lead_s
    parallel = bool(plan.get("parallel", False))
    runs = []
    batch = 0
    for repeat in range(1, max(e["repeats"] for e in entries) + 1):
        round_batches = []  # (batch number, busy hosts)
        for e in entries:
            if repeat > e["repeats"]:
                continue
            if e["rounds"] is not None:
                # Its own rounds, as planned: each a batch of its own.
                for rnd in e["rounds"]:
                    batch += 1
                    for sender, receiver in rnd:
                        runs.append(_run(len(runs) + 1, batch, e, sender, receiver, repeat, hostvars))
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
                runs.append(_run(len(runs) + 1, slot[0], e, sender, receiver, repeat, hostvars))
    runs.sort(key=lambda r: (r["batch"], r["seq"]))
    width = max(4, len(str(len(runs))))
    for n, r in enumerate(runs, 1):
        r["id"] = "%0*d" % (width, n)
    return runs


def _run(seq, batch, e, sender, receiver, repeat, hostvars):
    target, error = _address(hostvars, receiver, e["address"])
    return {"seq": seq, "batch": batch, "entry": e["name"], "sender": sender, "receiver": receiver,
            "address": e["address"], "target": target, "error": error, "repeat": repeat, "args": e["args"],
            "limit_s": e["limit_s"], "test_s": e["test_s"], "peer": e["peer"], "port": e["port"],
            "start_lead_s": e["start_lead_s"]}


def _test_s(options):
    get = lambda *names: next((options[n] for n in names if n in (options or {})), None)
    return (_seconds(get("time", "t") or "10s", "time") + _seconds(get("warmup") or "1s", "warmup")
            + _seconds(get("cooldown") or "250ms", "cooldown"))


def _waves(runs, forks):
    return max(1, int(math.ceil(len(runs) / float(max(1, forks)))))


def fleet_start_lead(batch, forks=16):
    """Seconds from the start of a round's launch to its `--start-at` (None: the round does
    not start together: one run, or runs against another tool, which cannot wait)."""
    if len(batch) < 2 or any(r.get("peer") for r in batch):
        return None
    if batch[0].get("start_lead_s") is not None:
        return float(batch[0]["start_lead_s"])
    return START_LEAD_S + LEAD_PER_WAVE_S * (_waves(batch, forks) - 1)


def fleet_round_plan(batch, now, forks=16):
    """What the controller notes as it begins a round: when, the `--start-at` its senders get
    (0: none, the round does not start together) and how long its tests last."""
    lead = fleet_start_lead(batch, forks)
    return {"batch": batch[0]["batch"], "began": round(float(now), 3), "lead_s": int(math.ceil(lead or 0)),
            "start_at": round(float(now) + lead, 3) if lead is not None else 0,
            "test_s": max(r["test_s"] for r in batch)}


def fleet_run_of(batch, host):
    """The run `host` sends in this round ({} when it sends none, or its run cannot start)."""
    return next((r for r in batch if r["sender"] == host and not r.get("error")), {})


def fleet_send_argv(run, binary, default_port, round_plan):
    """The sender's command line: `send -J` to its target, the plan's options, and the
    round's `--start-at` when it starts together."""
    argv = [str(binary), "send", "-c", str(run["target"]), "-p", str(run["port"] or default_port), "-J"]
    argv += [str(a) for a in run["args"]]
    if round_plan.get("start_at"):
        argv += ["--start-at", "%.3f" % float(round_plan["start_at"])]
    return argv


def fleet_round_left(round_plan, now):
    """Whole seconds from `now` until the round's tests should have ended."""
    start = float(round_plan.get("start_at") or round_plan["began"])
    return max(0, int(math.ceil(start + float(round_plan["test_s"]) - float(now))))


def fleet_estimate(runs, forks=16):
    """Runs, rounds and the wall time the plan should take: each round lasts its longest test,
    its start lead and the controller's own time (ROUND_OVERHEAD_S, plus WAVE_OVERHEAD_S per
    further wave of `forks` senders)."""
    batches = fleet_batches(runs)
    seconds = 0.0
    for b in batches:
        lead = fleet_start_lead(b, forks) or 0.0
        seconds += max(r["test_s"] for r in b) + lead + ROUND_OVERHEAD_S + WAVE_OVERHEAD_S * (_waves(b, forks) - 1)
    hosts = {h for r in runs for h in (r["sender"], r["receiver"])}
    largest = max((len(b) for b in batches), default=0)
    text = "%d runs in %d rounds over %d hosts (up to %d runs at once), about %s" % (
        len(runs), len(batches), len(hosts), largest, _duration_text(seconds))
    return {"runs": len(runs), "rounds": len(batches), "hosts": len(hosts), "largest_round": largest,
            "seconds": round(seconds, 1), "text": text}


def _duration_text(s):
    s = int(round(s))
    if s >= 86400:
        return "%d d %d h" % (s // 86400, s % 86400 // 3600)
    if s >= 3600:
        return "%d h %d min" % (s // 3600, s % 3600 // 60)
    if s >= 60:
        return "%d min %d s" % (s // 60, s % 60)
    return "%d s" % s


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


def _result(hv, name):
    """A registered result of a sender's round task, or None where the task was skipped."""
    if name not in hv or not isinstance(hv[name], dict) or hv[name].get("skipped"):
        return None
    return hv[name]


def fleet_round_records(batch, hostvars, round_plan, saved):
    """Records of a round run by the host play: each sender's registered launch and wait
    results, with the round's times on the controller's clock (began, start_at, saved)."""
    out = []
    for run in batch:
        hv = hostvars[run["sender"]]
        launched, finished = _result(hv, "fleet_launched"), _result(hv, "fleet_finished")
        if launched is not None and finished is None and not launched.get("unreachable") and "ansible_job_id" in launched:
            finished = {"rc": None, "msg": "the run's result could not be collected", "stderr": ""}
        if launched is None and "fleet_launched" not in hv and not run.get("error"):
            # Ansible leaves a host that was unreachable in an earlier play out of later ones.
            launched = {"unreachable": True, "msg": "left out of the rounds after an earlier task could not reach it"}
        rec = fleet_record(run, launched, finished, _facts_of(hostvars, run["sender"]), _facts_of(hostvars, run["receiver"]))
        rec["round"] = {"began": round_plan["began"], "start_at": round_plan.get("start_at") or None,
                        "saved": round(float(saved), 3), "test_s": round_plan["test_s"], "runs": len(batch)}
        out.append(rec)
    return out


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
            "fleet_round_records": fleet_round_records,
            "fleet_round_plan": fleet_round_plan,
            "fleet_round_left": fleet_round_left,
            "fleet_send_argv": fleet_send_argv,
            "fleet_run_of": fleet_run_of,
            "fleet_start_lead": fleet_start_lead,
            "fleet_estimate": wrap(fleet_estimate),
        }
