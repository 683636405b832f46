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
                           ({"entries": [{"name": "e"}]}, "needs 'mesh' or 'pairs'"),
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

    def test_records_match_launches_by_id(self):
        run2 = dict(self.RUN, id="0002", sender="c")
        launched = {"results": [{"item": self.RUN, "ansible_job_id": "j1"}, {"item": run2, "unreachable": True, "msg": "down"}]}
        finished = {"results": [{"item": {"item": self.RUN}, "rc": 0, "stdout": "{}", "finished": 1}]}
        recs = fleet.fleet_records([self.RUN, run2], launched, finished, {"a": {"machine_type": "m1"}, "b": {}, "c": {}})
        self.assertEqual([r["error"] for r in recs], [None, "c unreachable: down"])
        self.assertEqual(recs[0]["sender_facts"], {"host": "a", "reachable": False, "machine_type": "m1"})


if __name__ == "__main__":
    unittest.main()
