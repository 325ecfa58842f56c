#!/usr/bin/env python3
# tools/sharc-trace against synthetic dumps that follow the dump format: each class of culprit
# (missing rank, behind, skipped call, other collective, mismatched arguments, slow rank, local
# failure, wait cycle) checked on the first line exactly; malformed files, several worlds,
# splits, a ring that dropped old entries, --json, and --live against Unix-socket servers.
# Runs with `python3 test_sharc_trace.py` (CTest) or pytest. SHARC_TRACE_TOOL names the tool.
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest
from importlib.machinery import SourceFileLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_builder import KEY, Job, comm, ent, history  # noqa: E402

TOOL = os.environ.get("SHARC_TRACE_TOOL") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "sharc-trace")


def run(*args, env=None, timeout=30):
    p = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True,
                       timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


class Case(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="sharc-trace-test.")
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def analyze(self, job, *args):
        job.write(self.dir)
        rc, out, err = run(self.dir, *args)
        self.assertEqual(rc, 0, err)
        return out

    def first(self, job):
        return self.analyze(job).splitlines()[0]

    def report(self, job):
        return json.loads(self.analyze(job, "--json"))


def stuck_ring(job, seq, ranks, coll="AllGather", peers=None, reason="peer-failure", **kw):
    """Ranks that completed #1..#seq-1 and wait in #seq (on peers[r] where given)."""
    for r in ranks:
        peer = (peers or {}).get(r)
        job.dump(r, [comm(history(seq - 1, coll) +
                          [ent(seq, coll, state="started", peer=peer, **kw)])],
                 reason="timeout" if r == min(ranks) else reason)


class Culprits(Case):
    def test_stopped_rank_without_dump_is_the_end_of_the_chain(self):
        j = Job()
        stuck_ring(j, 57, [0, 1, 3], peers={0: 2, 1: 0, 3: 1})
        out = self.analyze(j)
        self.assertEqual(out.splitlines()[0], f"culprit: rank {j.who(2)} produced no dump; it is "
                         "the peer that ranks 0, 1, 3 wait on in AllGather #57")
        self.assertIn("  3 -> 1 -> 0 -> 2 (no dump)", out)
        self.assertIn("communicator 0: rank 0 #56", out)
        self.assertIn("rank 2 no dump", out)

    def test_killed_rank_without_progress_in_the_dumps(self):
        # Entries that failed keep no "progress": the analysis goes by sequence numbers alone.
        j = Job()
        for r in (0, 1, 3):
            j.dump(r, [comm(history(56) + [ent(57, state="failed")], state="failed")],
                   reason="failure" if r == 0 else "peer-failure",
                   message="AllGather #57: peer 2 closed the connection")
        lines = self.analyze(j).splitlines()
        self.assertEqual(lines[0], f"culprit: rank {j.who(2)} produced no dump; ranks 0, 1, 3 "
                         "wait in AllGather #57")
        self.assertIn("chain: no rank reports a peer it waits on", lines)
        self.assertTrue(any(ln.startswith(f"also: rank {j.who(0)} failed in AllGather #57")
                            for ln in lines))

    def test_two_ranks_without_dump(self):
        # Each is the end of its own chain: one line each, both culprits.
        j = Job(size=6)
        stuck_ring(j, 9, [0, 1, 2, 3], coll="ReduceScatter", peers={0: 5, 1: 4, 2: 1, 3: 0})
        lines = self.analyze(j).splitlines()
        self.assertEqual(lines[0], f"culprit: rank {j.who(4)} produced no dump; it is the peer "
                         "that ranks 1, 2 wait on in ReduceScatter #9")
        self.assertEqual(lines[1], f"culprit: rank {j.who(5)} produced no dump; it is the peer "
                         "that ranks 0, 3 wait on in ReduceScatter #9")

    def test_two_killed_ranks_share_the_line(self):
        j = Job(size=6)
        stuck_ring(j, 9, [0, 1, 2, 3], coll="ReduceScatter")
        self.assertEqual(self.first(j), f"culprit: ranks {j.who(4)}, {j.who(5)} produced no "
                         "dump; ranks 0-3 wait in ReduceScatter #9")

    def test_rank_behind(self):
        j = Job()
        stuck_ring(j, 7, [0, 2, 3])
        j.dump(1, [comm(history(6))], reason="peer-failure")
        self.assertEqual(self.first(j), f"culprit: rank {j.who(1)} is behind: last completed #6,"
                         " ranks 0, 2, 3 wait in AllGather #7")

    def test_rank_behind_found_through_the_chain(self):
        j = Job()
        stuck_ring(j, 7, [0, 2, 3], peers={2: 1, 3: 2, 0: 3})
        j.dump(1, [comm(history(6))], reason="peer-failure")
        out = self.analyze(j)
        self.assertEqual(out.splitlines()[0], f"culprit: rank {j.who(1)} is behind: last "
                         "completed #6, ranks 0, 2, 3 wait in AllGather #7")
        self.assertIn("  0 -> 3 -> 2 -> 1", out)

    def test_rank_in_another_collective(self):
        j = Job()
        stuck_ring(j, 7, [0, 1, 2], coll="AllReduce")
        j.dump(3, [comm(history(6, "AllReduce") + [ent(7, "AllGather", state="started")])])
        out = self.analyze(j)
        self.assertEqual(out.splitlines()[0], f"culprit: rank {j.who(3)} called AllGather #7 "
                         "where ranks 0, 1, 2 called AllReduce #7")
        self.assertIn("  communicator 0 #7 collective: AllReduce (ranks 0, 1, 2); AllGather "
                      "(rank 3)", out)

    def test_rank_that_skipped_a_call_and_went_on(self):
        j = Job()
        stuck_ring(j, 7, [0, 1, 2], coll="AllReduce", peers={0: 3, 1: 0, 2: 1})
        j.dump(3, [comm(history(7, "AllReduce") + [ent(8, "AllReduce", state="started")])])
        self.assertEqual(self.first(j), f"culprit: rank {j.who(3)} skipped a call: it completed "
                         "AllReduce #7 and went on to AllReduce #8 while ranks 0, 1, 2 still "
                         "wait in AllReduce #7")

    def test_rank_that_skipped_a_call_without_progress(self):
        j = Job()
        stuck_ring(j, 7, [0, 1, 2], coll="AllReduce")
        j.dump(3, [comm(history(7, "AllReduce"))])
        self.assertEqual(self.first(j), f"culprit: rank {j.who(3)} skipped a call: it completed "
                         "AllReduce #7 and went on (last completed #7) while ranks 0, 1, 2 still "
                         "wait in AllReduce #7")

    def test_mismatched_count(self):
        j = Job()
        for r in range(4):
            j.dump(r, [comm(history(6, "AllReduce") +
                            [ent(7, "AllReduce", state="failed", count=500 if r == 2 else 1000)],
                            state="failed")], reason="failure")
        rep = self.report(j)
        self.assertEqual(rep["summary"], f"culprit: rank {j.who(2)} called AllReduce #7 with "
                         "count 500 where ranks 0, 1, 3 called it with count 1000")
        self.assertEqual(rep["mismatches"], [{
            "communicator": 0, "world_ranks": [0, 1, 2, 3], "seq": 7, "field": "count",
            "values": [{"value": 1000, "ranks": [0, 1, 3]}, {"value": 500, "ranks": [2]}]}])
        self.assertEqual([(c["rank"], c["reason"]) for c in rep["culprits"]], [(2, "mismatch")])

    def test_mismatched_root(self):
        j = Job()
        for r in range(4):
            j.dump(r, [comm(history(6) + [ent(7, "Broadcast", state="started",
                                              root=1 if r == 1 else 0)])])
        self.assertEqual(self.first(j), f"culprit: rank {j.who(1)} called Broadcast #7 with "
                         "root 1 where ranks 0, 2, 3 called it with root 0")

    def test_mismatched_dtype_and_op(self):
        j = Job()
        for r in range(4):
            odd = r == 0
            j.dump(r, [comm(history(6) + [ent(7, "AllReduce", state="started",
                                              dtype="float16" if odd else "float32",
                                              op="max" if odd else "sum")])])
        self.assertEqual(self.first(j), f"culprit: rank {j.who(0)} called AllReduce #7 with "
                         "dtype float16, op max where ranks 1, 2, 3 called it with dtype "
                         "float32, op sum")

    def test_slow_rank(self):
        j = Job()
        for r in range(4):
            es = history(9)
            late = 3.0 if r == 2 else 0.0
            es[6] = ent(7, at=7 + late, took=(0.1 if r == 2 else 3.1))
            j.dump(r, [comm(es)], reason="request")
        self.assertEqual(self.first(j), f"culprit: rank {j.who(2)} is a slow rank: it started "
                         "AllGather #7 late by 3.00 s and ranks 0, 1, 3 waited for it")

    def test_late_but_under_the_threshold_is_no_culprit(self):
        j = Job()
        for r in range(4):
            es = history(9)
            es[6] = ent(7, at=7.2 if r == 2 else 7)
            j.dump(r, [comm(es)], reason="request")
        self.assertEqual(self.first(j), "culprit: none: every rank completed every call it made")

    def test_rank_that_failed_first(self):
        j = Job()
        for r in range(4):
            e = ent(7, state="failed")
            e["error"] = ("AllGather #7: completion error from the provider (injected)" if r == 1
                          else "AllGather #7: rank 1 aborted")
            j.dump(r, [comm(history(6) + [e], state="failed")],
                   reason="failure" if r == 1 else "peer-failure")
        self.assertEqual(self.first(j), f"culprit: rank {j.who(1)} failed in AllGather #7: "
                         "AllGather #7: completion error from the provider (injected)")

    def test_rank_that_failed_first_while_another_was_one_call_behind(self):
        # Rank 1's own error ended call #9; rank 2 was still finishing #8 when rank 1's abort
        # notice came (found by the fault campaign: fail:rank=1,seq=9). Rank 1 is the culprit.
        j = Job()
        for r in range(4):
            seq = 8 if r == 2 else 9
            e = ent(seq, state="failed")
            e["error"] = (f"AllGather #{seq}: completion error injected by SHARC_FAULT" if r == 1
                          else f"AllGather #{seq}: rank 1 aborted")
            j.dump(r, [comm(history(seq - 1) + [e], state="failed")],
                   reason="failure" if r == 1 else "peer-failure")
        self.assertEqual(self.first(j), f"culprit: rank {j.who(1)} failed in AllGather #9: "
                         "AllGather #9: completion error injected by SHARC_FAULT")

    def test_killed_rank_that_a_local_failure_names(self):
        # Found by the fault campaign (kill:rank=3): rank 0's own call failed reading from peer
        # 3's memory, the others heard rank 0's notice; rank 3 wrote nothing. Rank 0 is a victim.
        j = Job()
        for r in (0, 1, 2):
            e = ent(5, state="failed")
            e["error"] = ("rank 0: AllReduce #5: single-copy read from peer 3 failed: No such "
                          "process" if r == 0 else "rank %d: AllReduce #5: rank 0 aborted" % r)
            j.dump(r, [comm(history(4) + [e], state="failed")],
                   reason="failure" if r == 0 else "peer-failure")
        lines = self.analyze(j).splitlines()
        self.assertEqual(lines[0], f"culprit: rank {j.who(3)} produced no dump; rank 0 fails on "
                         "it in AllGather #5")
        self.assertFalse(any(ln.startswith("culprit:") for ln in lines[1:]), lines)

    def test_rank_that_failed_because_the_culprit_failed(self):
        # drop:rank=2: rank 2's endpoint went away; rank 3 then failed reading from peer 2.
        j = Job()
        for r in range(4):
            e = ent(9, state="failed")
            e["error"] = {2: "rank 2: AllGather #9: could not post send to peer 0: endpoint dropped",
                          3: "rank 3: AllGather #9: single-copy read from peer 2 failed"}.get(
                              r, f"rank {r}: AllGather #9: rank 3 aborted")
            j.dump(r, [comm(history(8) + [e], state="failed")],
                   reason="failure" if r in (2, 3) else "peer-failure")
        lines = self.analyze(j).splitlines()
        self.assertTrue(lines[0].startswith(f"culprit: rank {j.who(2)} failed in AllGather #9"),
                        lines)
        self.assertFalse(any(ln.startswith("culprit:") for ln in lines[1:]), lines)

    def test_rank_that_called_abort(self):
        j = Job()
        for r in range(4):
            j.dump(r, [comm(history(6) + [ent(7, state="failed")], state="failed")],
                   reason="abort" if r == 3 else "peer-failure")
        self.assertEqual(self.first(j), f"culprit: rank {j.who(3)} aborted in AllGather #7 "
                         "(Communicator::abort)")

    def test_everyone_in_the_same_call_and_nothing_else_known(self):
        j = Job()
        stuck_ring(j, 7, range(4))
        rep = self.report(j)
        self.assertEqual(rep["summary"], "culprit: none found: ranks 0-3 wait in AllGather #7 "
                         "and no rank is missing, behind or in another call")
        self.assertEqual(rep["culprits"], [])

    def test_rank_stuck_in_the_call(self):
        j = Job()
        stuck_ring(j, 7, [0, 1, 3], peers={0: 2, 1: 0, 3: 1})
        j.dump(2, [comm(history(6) + [ent(7, state="started", peer=-1, waiting_for="local")])])
        self.assertEqual(self.first(j), f"culprit: rank {j.who(2)} is stuck in AllGather #7 "
                         "(started, waiting for local, step 2/6, 93.0 s); ranks 0, 1, 3 wait on "
                         "it")

    def test_cycle_names_no_culprit(self):
        j = Job()
        stuck_ring(j, 7, range(4), peers={0: 3, 3: 2, 2: 1, 1: 0})
        self.assertEqual(self.first(j), "culprit: none found: ranks 0-3 wait on each other in "
                         "AllGather #7 (0 -> 3 -> 2 -> 1 -> 0); none is missing, behind or in "
                         "another call")

    def test_cycle_with_progress_times_names_the_first_to_stall(self):
        j = Job()
        for r, peer in {0: 3, 3: 2, 2: 1, 1: 0}.items():
            e = ent(7, state="started", peer=peer)
            e["progress"]["last_progress_ns"] = e["started_ns"] + (1 if r == 2 else 2) * 10**9
            j.dump(r, [comm(history(6) + [e])])
        self.assertEqual(self.first(j), f"culprit: rank {j.who(2)} stopped making progress "
                         "first: nothing moved in AllGather #7 for 92.0 s; ranks 0, 1, 3 wait "
                         "on it in a cycle (2 -> 1 -> 0 -> 3 -> 2)")

    def test_rank_the_stall_probe_found_stopped_is_the_culprit_of_a_cycle(self):
        # Resumed before it died, a stopped rank writes a timeout dump and the waits form a
        # cycle (CI: Bruck 2 -> 3 -> 1 -> 2); rank 1's stall probe had found it stopped.
        j = Job()
        probe = (f"rank 2 (world rank 2, pid {j.pids[2]}) did not answer the stall probe: its "
                 "process is stopped")
        for r, peer in {0: 1, 1: 2, 2: 3, 3: 1}.items():
            extra = {"stall_probe": probe} if r == 1 else {}
            j.dump(r, [comm(history(6) + [ent(7, state="started", peer=peer, **extra)])])
        self.assertEqual(self.first(j), f"culprit: rank {j.who(2)} was stopped (its process did "
                         "not run): the stall probe of rank 1 found it so in AllGather #7")

    def test_point_to_point_peer_that_did_not_join(self):
        j = Job(size=2)
        j.dump(0, [comm(history(5) + [ent(0, "SendRecv", state="started", p2p_seq=3, peer=1)])])
        j.dump(1, [comm(history(5))])
        self.assertEqual(self.first(j), f"culprit: rank {j.who(1)} has not joined SendRecv p2p "
                         "#3 that rank 0 waits in (last completed #5)")


class Inputs(Case):
    def test_malformed_files_are_named_and_skipped(self):
        j = Job()
        stuck_ring(j, 57, [0, 1, 3])
        j.write(self.dir)
        half = json.dumps(stuck_ring_dump(j, 2))[:300]
        files = {f"sharc-trace-{KEY}-rank2.json": half,
                 "sharc-trace-garbage.json": "\x00\x01 not json",
                 "sharc-trace-empty.json": "",
                 "sharc-trace-other.json": json.dumps({"format": "something-else"}),
                 "sharc-trace-array.json": "[1, 2]",
                 "sharc-trace-huge.json": json.dumps({"format": "sharc-trace", "version": 1,
                                                      "world": {"key": KEY, "rank": 0,
                                                                "size": 10**30}}),
                 "sharc-trace-badworld.json": json.dumps({"format": "sharc-trace", "version": 1,
                                                          "world": {"key": KEY, "rank": 9,
                                                                    "size": 4}})}
        for name, text in files.items():
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(text)
        rc, out, err = run(self.dir)
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(lines[0], f"culprit: rank {j.who(2)} produced no dump; ranks 0, 1, 3 "
                         "wait in AllGather #57")
        bad = [ln for ln in lines if ln.startswith("unreadable: ")]
        self.assertEqual(len(bad), len(files), out)
        self.assertTrue(any(ln.startswith(f"unreadable: sharc-trace-{KEY}-rank2.json: not valid "
                                          "JSON (") and ln.endswith("half-written?")
                            for ln in bad), bad)
        self.assertIn("unreadable: sharc-trace-empty.json: empty", bad)
        self.assertIn('unreadable: sharc-trace-other.json: not a sharc-trace dump (no "format": '
                      '"sharc-trace")', bad)

    def test_bad_communicators_and_entries_are_skipped(self):
        j = Job()
        stuck_ring(j, 7, [0, 2, 3])
        d = j.dump(1, [comm(history(6))], reason="peer-failure")
        d["communicators"][0]["entries"] += [17, {"seq": "x"}, None]
        d["communicators"].append({"id": "one"})
        d["version"] = 2
        out = self.analyze(j)
        self.assertEqual(out.splitlines()[0], f"culprit: rank {j.who(1)} is behind: last "
                         "completed #6, ranks 0, 2, 3 wait in AllGather #7")
        self.assertIn(f"unreadable: sharc-trace-{KEY}-rank1.json: 2 malformed entries skipped",
                      out)
        self.assertIn("format version 2, read as version 1", out)

    def test_mutated_dumps_never_crash_the_analysis(self):
        # Values replaced by other JSON types, keys deleted, files cut short (seeded): every
        # mutation is either reported as unreadable or analysed, never an exception.
        here = os.path.dirname(os.path.realpath(TOOL))
        sys.path[:0] = [here, os.path.join(here, "..", "share", "sharc")]
        import sharc_trace_analysis as analysis
        loader = SourceFileLoader("sharc_trace_cli", TOOL)  # the text output too
        cli = types.ModuleType(loader.name)
        cli.__file__ = TOOL
        loader.exec_module(cli)
        rnd = random.Random(13)
        vals = [None, -1, 0, 3, 10**30, "x", "", [], {}, [1, 2], {"a": 1}, 1.5, True, "AllReduce"]

        def mutate(o):
            for k in (list(o) if isinstance(o, dict) else range(len(o))
                      if isinstance(o, list) else []):
                x = rnd.random()
                if x < 0.03:
                    o[k] = rnd.choice(vals)
                elif x < 0.04 and isinstance(o, dict):
                    del o[k]
                else:
                    mutate(o[k])
        j = Job()
        stuck_ring(j, 21, [0, 1, 3], peers={0: 2, 1: 0, 3: 1})
        base = [json.dumps(d) for d in j.dumps.values()]
        analysed = 0
        for _ in range(300):
            items = []
            for r, text in enumerate(base):
                o = json.loads(text)
                mutate(o)
                data = json.dumps(o).encode()
                if rnd.random() < 0.05:
                    data = data[:rnd.randrange(len(data))]
                items.append((f"sharc-trace-{KEY}-rank{r}.json", data))
            worlds, loose = analysis.load(items)
            if worlds:
                res = analysis.analyze(worlds, loose)
                self.assertTrue(res["summary"].startswith("culprit: "))
                json.dumps(res)
                for w in res["worlds"]:
                    self.assertTrue(cli.render(w).startswith("culprit: "))
                analysed += 1
        self.assertGreater(analysed, 200)

    def test_only_garbage_is_a_usage_error(self):
        with open(os.path.join(self.dir, "sharc-trace-x-rank0.json"), "w") as f:
            f.write("{")
        rc, out, err = run(self.dir)
        self.assertEqual(rc, 2)
        self.assertEqual(out, "")
        self.assertIn("sharc-trace-x-rank0.json: not valid JSON", err)
        self.assertIn("no readable dumps", err)

    def test_usage_errors(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHARC_TRACE")}
        self.assertEqual(run(env=env)[0], 2)
        self.assertEqual(run("--live", env=env)[0], 2)
        self.assertEqual(run(os.path.join(self.dir, "nope"))[0], 2)
        rc, _, err = run(self.dir)
        self.assertEqual(rc, 2)
        self.assertIn("no readable dumps", err)
        env["SHARC_TRACE_DIR"] = self.dir  # the default directory: empty here
        self.assertEqual(run(env=env)[0], 2)

    def test_two_worlds_the_one_with_a_culprit_first(self):
        healthy = Job(key="00000000000000aa")
        for r in range(4):
            healthy.dump(r, [comm(history(3))], reason="signal", at=500)
        healthy.write(self.dir)
        j = Job()
        stuck_ring(j, 57, [0, 1, 3], peers={0: 2, 1: 0, 3: 1})
        out = self.analyze(j)
        self.assertEqual(out.splitlines()[0], f"culprit: rank {j.who(2)} produced no dump; it is "
                         "the peer that ranks 0, 1, 3 wait on in AllGather #57")
        blocks = out.split("\n\n")
        self.assertEqual(len(blocks), 2)
        self.assertIn(f"world {KEY}: 4 ranks", blocks[0])
        self.assertTrue(blocks[1].startswith("culprit: none: every rank completed"))
        self.assertIn("world 00000000000000aa: 4 ranks", blocks[1])

    def test_split_communicators_are_aligned_by_id_and_world_ranks(self):
        # Two splits with the same id: {0, 2} is healthy; in {1, 3} rank 3 is behind. Their
        # sequence numbers must not be compared with each other's or the world's.
        j = Job()
        world = comm(history(5, "AllReduce"))
        for r in range(4):
            pair = (0, 2) if r % 2 == 0 else (1, 3)
            es = history(3, "AllGather")
            if r == 1:
                es.append(ent(4, "Broadcast", state="started", root=0, peer=3))
            elif r % 2 == 0:
                es.append(ent(4, "ReduceScatter"))
            j.dump(r, [json.loads(json.dumps(world)),
                       comm(es, world_ranks=pair, id=1, parent=0)])
        rep = self.report(j)
        self.assertEqual(rep["summary"], f"culprit: rank {j.who(3)} is behind: last completed #3,"
                         " rank 1 waits in Broadcast #4 on communicator 1")
        self.assertEqual(rep["mismatches"], [])
        groups = {tuple(c["world_ranks"]): c for c in rep["last_completed"]}
        self.assertEqual(set(groups), {(0, 1, 2, 3), (0, 2), (1, 3)})
        self.assertEqual([x["last_completed_seq"] for x in groups[(0, 2)]["ranks"]], [4, 4])
        self.assertEqual([x["last_completed_seq"] for x in groups[(1, 3)]["ranks"]], [3, 3])

    def test_ring_that_dropped_old_entries(self):
        # Only the last entries are kept, and not the same number on every rank.
        j = Job()
        for r, keep in ((0, 20), (2, 7), (3, 50)):
            es = history(2049, first=2050 - keep) + [ent(2050, state="started")]
            j.dump(r, [comm(es, calls=2050, last=2049)])
        j.dump(1, [comm(history(2048, first=2040), calls=2048, last=2048)])
        rep = self.report(j)
        self.assertEqual(rep["summary"], f"culprit: rank {j.who(1)} is behind: last completed "
                         "#2048, ranks 0, 2, 3 wait in AllGather #2050")
        self.assertEqual(rep["mismatches"], [])

    def test_json_shape(self):
        j = Job()
        stuck_ring(j, 57, [0, 1, 3], peers={0: 2, 1: 0, 3: 1})
        rep = self.report(j)
        self.assertEqual(rep["format"], "sharc-trace-analysis")
        for k in ("summary", "culprits", "also", "chain", "mismatches", "last_completed",
                  "worlds", "problems"):
            self.assertIn(k, rep)
        self.assertEqual(rep["culprits"], [{
            "rank": 2, "host": "node-b", "pid": 1232, "seq": 57, "communicator": 0,
            "collective": "AllGather", "reason": "no-dump", "waiters": [0, 1, 3],
            "message": rep["summary"]}])
        self.assertEqual(sorted((c["rank"], c["waits_on"]) for c in rep["chain"]),
                         [(0, 2), (1, 0), (3, 1)])
        self.assertEqual(rep["worlds"][0]["chains"], [[3, 1, 0, 2]])
        self.assertEqual(rep["worlds"][0]["ranks_without_dump"], [2])
        c0 = next(c for c in rep["chain"] if c["rank"] == 0)
        self.assertEqual((c0["seq"], c0["collective"], c0["waiting_for"], c0["bytes_received"],
                          c0["bytes_expected"]), (57, "AllGather", "recv", 4096, 12288))
        rows = rep["last_completed"][0]["ranks"]
        self.assertEqual([(x["rank"], x["last_completed_seq"]) for x in rows],
                         [(0, 56), (1, 56), (2, None), (3, 56)])


def stuck_ring_dump(job, r):
    return {"format": "sharc-trace", "version": 1, "world": {"key": job.key, "rank": r,
                                                             "size": job.size},
            "communicators": [comm(history(56) + [ent(57, state="started")])]}


class Server(threading.Thread):
    """Serves `payload` once per connection on a Unix socket (hang: accept, never answer)."""

    def __init__(self, path, payload, hang=False):
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(4)
        self.payload, self.hang, self.conns = payload, hang, []

    def run(self):
        try:
            while True:
                c, _ = self.sock.accept()
                self.conns.append(c)
                if not self.hang:
                    for i in range(0, len(self.payload), 1000):  # in pieces, like a real rank
                        c.sendall(self.payload[i:i + 1000])
                    c.close()
        except OSError:
            pass

    def stop(self):
        for c in self.conns:
            c.close()
        self.sock.close()


class Live(Case):
    def serve(self, job, hang=()):
        servers = []
        for r, d in job.dumps.items():
            s = Server(os.path.join(self.dir, f"sharc-{job.key}-rank{r}.sock"),
                       json.dumps(d).encode(), hang=r in hang)
            s.start()
            servers.append(s)
            self.addCleanup(s.stop)
        return servers

    def test_live_names_the_rank_whose_socket_is_dead(self):
        j = Job()
        stuck_ring(j, 57, [0, 1, 3], peers={0: 2, 1: 0, 3: 1}, reason="live")
        for d in j.dumps.values():
            d["reason"] = "live"
        self.serve(j)
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # bound, never listening
        dead.bind(os.path.join(self.dir, f"sharc-{KEY}-rank2.sock"))
        self.addCleanup(dead.close)
        rc, out, err = run("--live", self.dir)
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(lines[0], f"culprit: rank {j.who(2)} produced no dump; it is the peer "
                         "that ranks 0, 1, 3 wait on in AllGather #57")
        self.assertTrue(any(ln.startswith(f"unreadable: sharc-{KEY}-rank2.sock: unreachable")
                            for ln in lines), out)

    def test_live_socket_that_never_answers_times_out(self):
        j = Job()
        stuck_ring(j, 7, [0, 2, 3], reason="live")
        j.dump(1, [comm(history(6))], reason="live")
        for d in j.dumps.values():
            d["reason"] = "live"
        self.serve(j, hang={1})
        env = dict(os.environ, SHARC_TRACE_SOCKET=self.dir)
        t = time.monotonic()
        rc, out, err = run("--live", "--timeout", "0.5", env=env)
        self.assertLess(time.monotonic() - t, 10)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.splitlines()[0], f"culprit: rank {j.who(1)} produced no dump; "
                         "ranks 0, 2, 3 wait in AllGather #7")
        self.assertIn(f"unreadable: sharc-{KEY}-rank1.sock: no complete dump within 0.5 s", out)

    def test_live_healthy_job_in_a_young_call_has_no_culprit(self):
        j = Job()
        for r in range(4):
            j.dump(r, [comm(history(6) + [ent(7, state="started", peer=(r + 3) % 4)])],
                   reason="live", at=7.2)
        self.serve(j)
        rc, out, err = run("--live", "--json", self.dir)
        self.assertEqual(rc, 0, err)
        rep = json.loads(out)
        self.assertEqual(rep["summary"], "culprit: none: no call has waited 1 s or more (ranks "
                         "0-3 in AllGather #7)")
        self.assertEqual(rep["culprits"], [])

    def test_live_without_sockets_is_a_usage_error(self):
        rc, out, err = run("--live", self.dir)
        self.assertEqual(rc, 2)
        self.assertIn("no readable trace sockets", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
