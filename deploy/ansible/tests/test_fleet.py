# Unit tests of the planner and the record builder: python3 -m unittest discover -s deploy/ansible/tests
# (cli/tests/fleet.rs runs them). Kept out of filter_plugins/, where Ansible loads every file.
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "filter_plugins"))
import fleet  # noqa: E402

GROUPS = {"all": ["a", "b", "c", "d"], "fleet": ["a", "b", "c", "d"], "small": ["a", "b"], "large": ["c", "d"]}
HOSTVARS = {h: {"ansible_host": "10.0.0.%d" % i, "external_address": "192.0.2.%d" % i} for i, h in enumerate("abcd", 1)}
del HOSTVARS["d"]["external_address"]


class Planner(unittest.TestCase):
    def test_mesh_is_every_ordered_pair_with_interleaved_repeats(self):
        runs = fleet.fleet_runs({"repeats": 2, "options": {"time": "2s"}, "entries": [{"mesh": "fleet"}]}, GROUPS, HOSTVARS)
        self.assertEqual(len(runs), 24)
        self.assertEqual([r["repeat"] for r in runs], [1] * 12 + [2] * 12, "repeat 1 of every pair first")
        self.assertEqual(len({(r["sender"], r["receiver"]) for r in runs}), 12)
        self.assertEqual([r["id"] for r in runs[:2]], ["0001", "0002"])
        self.assertEqual(len({r["batch"] for r in runs}), 24, "one run at a time by default")
        self.assertEqual(runs[0]["args"], ["--time", "2s"])
        self.assertEqual(runs[0]["limit_s"], 4 + fleet.MARGIN_S)
        self.assertEqual(runs[0]["target"], "10.0.0.2")

    def test_parallel_batches_have_disjoint_hosts(self):
        runs = fleet.fleet_runs({"parallel": True, "entries": [{"mesh": "fleet"}]}, GROUPS, HOSTVARS)
        batches = fleet.fleet_batches(runs)
        self.assertEqual(sum(len(b) for b in batches), 12)
        self.assertTrue(any(len(b) == 2 for b in batches))
        for b in batches:
            hosts = [h for r in b for h in (r["sender"], r["receiver"])]
            self.assertEqual(len(hosts), len(set(hosts)), b)

    def test_pairs_by_group_addresses_and_options(self):
        plan = {"entries": [{"name": "x", "pairs": [{"from": "small", "to": "large"}, ["c", "a"]], "address": "external",
                             "options": {"queues": 4, "u": True, "len": "1470", "no_gso": False}, "repeats": 3}]}
        runs = fleet.fleet_runs(plan, GROUPS, HOSTVARS)
        self.assertEqual(len(runs), 5 * 3)
        self.assertEqual(runs[0]["args"], ["--queues", "4", "-u", "--len", "1470"])
        to_d = [r for r in runs if r["receiver"] == "d"]
        self.assertTrue(to_d and all(r["target"] is None and "no inventory variable 'external_address'" in r["error"] for r in to_d))
        self.assertEqual({r["target"] for r in runs if r["receiver"] == "c"}, {"192.0.2.3"})

    def test_peers_add_their_mode_and_their_servers_port(self):
        plan = {"peer": "iperf3", "options": {"time": "2s"},
                "entries": [{"name": "i3", "mesh": "small"}, {"name": "nt", "mesh": "large", "peer": "ntttcp", "peer_port": 6001},
                            {"name": "native", "mesh": "small", "peer": "uringbench"}]}
        runs = fleet.fleet_runs(plan, GROUPS, HOSTVARS)
        by_entry = {r["entry"]: r for r in runs}
        self.assertEqual((by_entry["i3"]["peer"], by_entry["i3"]["port"], by_entry["i3"]["args"]), ("iperf3", 5201, ["--iperf3", "--time", "2s"]))
        self.assertEqual((by_entry["nt"]["peer"], by_entry["nt"]["port"], by_entry["nt"]["args"][0]), ("ntttcp", 6001, "--ntttcp"))
        self.assertEqual((by_entry["native"]["peer"], by_entry["native"]["port"]), (None, None), "uringbench recv's port")
        self.assertEqual(fleet.fleet_plan_doc(runs)["runs"][0]["peer"], "iperf3")
        iperf2 = fleet.fleet_runs({"peer": "iperf2", "entries": [{"mesh": "small"}]}, GROUPS, HOSTVARS)
        self.assertEqual({(r["port"], r["args"][0]) for r in iperf2}, {(5001, "--iperf2")})

    def test_bad_plans_are_refused(self):
        for plan, want in [({}, "needs a list 'entries'"), ({"entries": [{"mesh": "nosuch"}]}, "neither a group nor a host"),
                           ({"entries": [{"name": "e"}]}, "needs one of mesh, pairs, tournament"),
                           ({"entries": [{"mesh": "fleet", "options": {"target": "x"}}]}, "set by the run role"),
                           ({"entries": [{"mesh": "fleet", "options": {"time": "soon"}}]}, "invalid duration"),
                           ({"entries": [{"mesh": "fleet", "repeats": 0}]}, "at least 1"),
                           ({"peer": "netperf", "entries": [{"mesh": "fleet"}]}, "peer 'netperf' is none of"),
                           ({"peer": "iperf3", "peer_port": "http", "entries": [{"mesh": "fleet"}]}, "is not a port"),
                           ({"entries": [{"mesh": "fleet", "options": {"iperf3": True}}]}, "set by the run role")]:
            with self.assertRaises(fleet.PlanError) as e:
                fleet.fleet_runs(plan, GROUPS, HOSTVARS)
            self.assertIn(want, str(e.exception))


class Records(unittest.TestCase):
    RUN = {"id": "0001", "seq": 1, "batch": 1, "entry": "m", "sender": "a", "receiver": "b", "address": "internal",
           "target": "10.0.0.2", "error": None, "repeat": 1, "args": [], "limit_s": 33}

    def test_a_document_an_unreachable_sender_and_a_timeout(self):
        ok = fleet.fleet_record(self.RUN, {}, {"rc": 0, "stdout": '{"schema_version": 1}', "stderr": ""}, {"vcpus": 1}, {})
        self.assertEqual((ok["rc"], ok["error"], ok["document"]), (0, None, {"schema_version": 1}))
        down = fleet.fleet_record(self.RUN, {"unreachable": True, "msg": "ssh: connect: refused\r\n"}, None, {}, {})
        self.assertEqual(down["error"], "a unreachable: ssh: connect: refused")
        late = fleet.fleet_record(self.RUN, {}, {"failed": 1, "msg": "Timeout exceeded", "finished": 1}, {}, {})
        self.assertEqual(late["error"], "no result within 33 s: the run was stopped")
        bad = fleet.fleet_record(self.RUN, {}, {"rc": 1, "stdout": "", "stderr": "uringbench: refused\n"}, {}, {})
        self.assertEqual(bad["error"], "uringbench: refused")

    def test_round_records_read_each_senders_results(self):
        run2 = dict(self.RUN, id="0002", sender="c", receiver="d")
        run3 = dict(self.RUN, id="0003", sender="e", receiver="f", target=None, error="f has no inventory variable 'x'")
        hostvars = {"a": {"machine_type": "m1", "fleet_launched": {"ansible_job_id": "j1"},
                          "fleet_finished": {"rc": 0, "stdout": "{}", "finished": 1}},
                    "c": {"fleet_launched": {"unreachable": True, "msg": "down"}, "fleet_finished": {"skipped": True}},
                    "b": {}, "d": {}, "e": {"fleet_launched": {"skipped": True}}, "f": {}}
        plan = {"batch": 1, "began": 100.0, "lead_s": 3, "start_at": 103.0, "test_s": 3.25}
        recs = fleet.fleet_round_records([self.RUN, run2, run3], hostvars, plan, 110.5)
        self.assertEqual([r["error"] for r in recs], [None, "c unreachable: down", "f has no inventory variable 'x'"])
        self.assertEqual(recs[0]["sender_facts"], {"host": "a", "reachable": False, "machine_type": "m1"})
        self.assertEqual(recs[0]["round"], {"began": 100.0, "start_at": 103.0, "saved": 110.5, "test_s": 3.25, "runs": 3})
        gone = fleet.fleet_round_records([dict(self.RUN, sender="z")], {"z": {}, "b": {}}, plan, 111.0)
        self.assertTrue(gone[0]["error"].startswith("z unreachable: left out of the rounds"), gone[0]["error"])

    def test_a_round_starts_together_and_its_argv_says_so(self):
        runs = fleet.fleet_runs({"options": {"time": "2s"}, "entries": [{"tournament": "fleet"}]}, GROUPS, HOSTVARS)
        first = fleet.fleet_batches(runs)[0]
        plan = fleet.fleet_round_plan(first, 1000.0, forks=16)
        self.assertEqual((plan["start_at"], plan["lead_s"], plan["test_s"]), (1000.0 + fleet.START_LEAD_S, 5, 3.25))
        argv = fleet.fleet_send_argv(first[0], "/x/uringbench", 5300, plan)
        self.assertEqual(argv[:7], ["/x/uringbench", "send", "-c", first[0]["target"], "-p", "5300", "-J"])
        self.assertEqual(argv[-2:], ["--start-at", "1005.000"])
        self.assertEqual(fleet.fleet_round_left(plan, 1001.0), 8, "3.25 s of test from 1005, seen at 1001")
        self.assertEqual(fleet.fleet_run_of(first, first[0]["sender"]), first[0])
        self.assertEqual(fleet.fleet_run_of(first, first[0]["receiver"]), {}, "a receiver sends nothing")
        # One run alone, or runs against another tool, do not wait for an instant.
        self.assertIsNone(fleet.fleet_start_lead(first[:1]))
        self.assertIsNone(fleet.fleet_start_lead([dict(r, peer="iperf3") for r in first]))
        self.assertEqual(fleet.fleet_start_lead([first[0]] * 40, forks=16), fleet.START_LEAD_S + 2 * fleet.LEAD_PER_WAVE_S)
        slow = fleet.fleet_runs({"start_lead": "12s", "entries": [{"tournament": "fleet"}]}, GROUPS, HOSTVARS)
        self.assertEqual(fleet.fleet_round_plan(fleet.fleet_batches(slow)[0], 1000.0)["start_at"], 1012.0)
        alone = fleet.fleet_round_plan(first[:1], 1000.0)
        self.assertEqual(alone["start_at"], 0)
        self.assertNotIn("--start-at", fleet.fleet_send_argv(first[0], "u", 5300, alone))


def hosts_of(n):
    names = ["h%02d" % i for i in range(n)]
    return {"all": names, "fleet": names}, {h: {"ansible_host": "10.1.0.%d" % i} for i, h in enumerate(names)}


class ScalablePlans(unittest.TestCase):
    def check_rounds(self, runs):
        for b in fleet.fleet_batches(runs):
            hosts = [h for r in b for h in (r["sender"], r["receiver"])]
            self.assertEqual(len(hosts), len(set(hosts)), "no host twice in a round: %s" % b)

    def test_tournament_covers_every_pair_once_in_n_minus_1_rounds(self):
        for n in (2, 3, 4, 5, 6, 7, 16, 17):
            groups, hostvars = hosts_of(n)
            runs = fleet.fleet_runs({"entries": [{"tournament": "fleet"}]}, groups, hostvars)
            pairs = [frozenset((r["sender"], r["receiver"])) for r in runs]
            self.assertEqual(len(pairs), n * (n - 1) // 2, n)
            self.assertEqual(len(set(pairs)), len(pairs), "every unordered pair exactly once (n=%d)" % n)
            rounds = fleet.fleet_batches(runs)
            # N even: N-1 rounds of N/2 pairs; N odd: the circle of N+1 with a bye, N rounds of (N-1)/2.
            self.assertEqual(len(rounds), n - 1 if n % 2 == 0 else n, n)
            self.assertTrue(all(len(b) == n // 2 for b in rounds), n)
            self.check_rounds(runs)
            if n % 2 == 1:
                sitting_out = [set(groups["fleet"]) - {h for r in b for h in (r["sender"], r["receiver"])} for b in rounds]
                self.assertEqual(sorted(h for s in sitting_out for h in s), sorted(groups["fleet"]), "each host sits out once")
            sends = [sum(r["sender"] == h for r in runs) for h in groups["fleet"]]
            self.assertLessEqual(max(sends) - min(sends), 2, "senders balanced: %s" % sends)

    def test_tournament_both_directions_mirrors_each_round(self):
        groups, hostvars = hosts_of(6)
        runs = fleet.fleet_runs({"repeats": 2, "entries": [{"tournament": "fleet", "directions": "both"}]}, groups, hostvars)
        self.assertEqual(len(runs), 2 * 30)
        self.assertEqual(len({(r["sender"], r["receiver"]) for r in runs}), 30, "every ordered pair, each repeat")
        rounds = fleet.fleet_batches(runs)
        self.assertEqual(len(rounds), 2 * 2 * 5)
        self.assertEqual({(r["receiver"], r["sender"]) for r in rounds[1]}, {(r["sender"], r["receiver"]) for r in rounds[0]})
        self.assertEqual([r["repeat"] for r in runs], [1] * 30 + [2] * 30)
        self.check_rounds(runs)

    def test_ring_and_its_rounds(self):
        for n in (4, 5):
            groups, hostvars = hosts_of(n)
            runs = fleet.fleet_runs({"entries": [{"ring": "fleet"}]}, groups, hostvars)
            names = groups["fleet"]
            self.assertEqual({(r["sender"], r["receiver"]) for r in runs}, {(names[i], names[(i + 1) % n]) for i in range(n)})
            self.assertEqual(len(fleet.fleet_batches(runs)), 2 if n % 2 == 0 else 3)
            self.check_rounds(runs)

    def test_k_random_is_reproducible_from_its_seed(self):
        groups, hostvars = hosts_of(10)
        plan = lambda seed: {"entries": [{"k_random": {"hosts": "fleet", "k": 3, "seed": seed}}]}
        runs = fleet.fleet_runs(plan(7), groups, hostvars)
        key = lambda rs: [(r["batch"], r["sender"], r["receiver"]) for r in rs]
        self.assertEqual(key(runs), key(fleet.fleet_runs(plan(7), groups, hostvars)), "same seed, same plan")
        self.assertNotEqual(key(runs), key(fleet.fleet_runs(plan(8), groups, hostvars)), "another seed, another plan")
        self.assertEqual((len(runs), len(fleet.fleet_batches(runs))), (15, 3), "k rounds of N/2 pairs")
        for h in groups["fleet"]:
            partners = [r["receiver"] if r["sender"] == h else r["sender"] for r in runs if h in (r["sender"], r["receiver"])]
            self.assertEqual(len(set(partners)), 3, "3 distinct partners for %s" % h)
        self.check_rounds(runs)

    def test_across_groups_pairs_only_across(self):
        names = ["a%d" % i for i in range(4)] + ["b%d" % i for i in range(3)]
        groups = {"all": names, "za": names[:4], "zb": names[4:]}
        hostvars = {h: {"ansible_host": "10.2.0.%d" % i} for i, h in enumerate(names)}
        plan = {"entries": [{"across": {"groups": ["za", "zb"], "k": 2, "seed": 1}}]}
        runs = fleet.fleet_runs(plan, groups, hostvars)
        self.assertEqual(len(runs), 7 * 2)
        self.assertTrue(all(r["sender"][0] != r["receiver"][0] for r in runs), "every pair crosses the groups")
        self.assertEqual([(r["sender"], r["receiver"]) for r in runs], [(r["sender"], r["receiver"]) for r in fleet.fleet_runs(plan, groups, hostvars)])
        self.check_rounds(runs)

    def test_estimate_and_refusals(self):
        groups, hostvars = hosts_of(16)
        runs = fleet.fleet_runs({"options": {"time": "2s"}, "entries": [{"tournament": "fleet"}]}, groups, hostvars)
        est = fleet.fleet_estimate(runs)
        self.assertEqual((est["runs"], est["rounds"], est["hosts"], est["largest_round"]), (120, 15, 16, 8))
        per_round = 3.25 + fleet.START_LEAD_S + fleet.ROUND_OVERHEAD_S
        self.assertAlmostEqual(est["seconds"], round(15 * per_round, 1))
        self.assertIn("120 runs in 15 rounds over 16 hosts", est["text"])
        for plan, want in [({"entries": [{"tournament": "fleet", "mesh": "fleet"}]}, "one of mesh, pairs"),
                           ({"entries": [{"k_random": {"hosts": "fleet", "k": 2}}]}, "needs a 'seed'"),
                           ({"entries": [{"k_random": {"hosts": "fleet", "k": 16, "seed": 1}}]}, "k (partners per host) must be"),
                           ({"entries": [{"tournament": "fleet", "directions": "up"}]}, "directions is 'one' or 'both'"),
                           ({"entries": [{"across": {"groups": ["fleet", "fleet"], "seed": 1}}]}, "is in both"),
                           ({"entries": [{"tournament": "h00"}]}, "at least 2 hosts"),
                           ({"entries": [{"tournament": "fleet", "options": {"start_at": "1"}}]}, "set by the run role")]:
            with self.assertRaises(fleet.PlanError) as e:
                fleet.fleet_runs(plan, groups, hostvars)
            self.assertIn(want, str(e.exception))


if __name__ == "__main__":
    unittest.main()
