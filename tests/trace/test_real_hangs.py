"""Real hangs and misuse, end to end: 4 ranks of tests/trace/hang_driver.cc on this host.

Each scenario makes one rank misbehave (frozen with SIGSTOP, killed with SIGKILL, a skipped
call, another collective, another count, another Broadcast root, a 3 s nap) and checks what a
user sees:
  * every surviving rank fails: misuse within the stall-probe threshold plus a second (the
    issue's bound; the probe threshold here is 1 s), a frozen or killed rank at the timeout
    plus 2 s; a slow rank's job succeeds;
  * the error names the sequence number (`AllGather #N`);
  * `sharc-trace DIR` on the real dumps prints, first line, the culprit: the right rank, its
    pid and the sequence number.
The bounds are wall-clock times on a loaded 2-core machine; each is the issue's bound (no
extra slack for misuse: it is the feature under test), plus 2 s for the timeout cases.
"""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

DRIVER = os.environ.get("SHARC_HANG_DRIVER", "")
TOOL = os.environ.get("SHARC_TRACE_TOOL", os.path.join(os.path.dirname(__file__), "..", "..",
                                                       "tools", "sharc-trace"))
WORLD = 4
PROBE_MS = 1000
TIMEOUT_MS = 5000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """4 ranks of the driver, their pids and outputs."""

    def __init__(self, trace_dir, scenario, calls, at, culprit, extra_env=None):
        port = free_port()
        self.procs = []
        self.trace_dir = trace_dir
        for rank in range(WORLD):
            env = dict(os.environ, SHARC_ROOT=f"127.0.0.1:{port}", SHARC_RANK=str(rank),
                       SHARC_WORLD_SIZE=str(WORLD), SHARC_TIMEOUT_MS=str(TIMEOUT_MS),
                       SHARC_STALL_PROBE_MS=str(PROBE_MS), SHARC_TRACE_DIR=trace_dir,
                       FI_TCP_IFACE="lo", SHARC_SOCKET_IFNAME="lo")
            env.update(extra_env or {})
            self.procs.append(subprocess.Popen(
                [DRIVER, scenario, str(calls), str(at), str(culprit)], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        self.pids = [p.pid for p in self.procs]
        self.out = [None] * WORLD

    def wait(self, ranks, limit):
        deadline = time.monotonic() + limit
        for r in ranks:
            try:
                self.out[r] = self.procs[r].communicate(
                    timeout=max(0.1, deadline - time.monotonic()))[0]
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"rank {r} still running after {limit} s: a hang")
        return self.out

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()


def result_line(text, rank):
    m = re.search(rf"^rank {rank}: (ok|error after (\d+) ms: .*)$", text or "", re.M)
    assert m, f"rank {rank} printed no result:\n{text}"
    return m.group(1), int(m.group(2)) if m.group(2) else None


def first_line(trace_dir):
    out = subprocess.run([sys.executable, TOOL, trace_dir], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.splitlines()[0], out.stdout


@unittest.skipUnless(DRIVER, "SHARC_HANG_DRIVER (the built hang_driver) not set")
class RealHangs(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sharc-hang-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def misuse(self, scenario, culprit, at=12, calls=20, culprit_may_succeed=False):
        job = Job(self.dir, scenario, calls, at, culprit)
        outs = job.wait(range(WORLD), 60)
        for r in range(WORLD):
            result, ms = result_line(outs[r], r)
            if r == culprit and culprit_may_succeed and result == "ok":
                continue
            self.assertTrue(result.startswith("error"), f"rank {r}: {outs[r]}")
            self.assertLessEqual(ms, PROBE_MS + 1000, f"rank {r} failed late: {result}")
            self.assertRegex(result, rf"#{at}\b")
        line, full = first_line(self.dir)
        self.assertRegex(line, rf"^culprit: rank {culprit} \(host [^,]+, pid {job.pids[culprit]}\)",
                         full)
        self.assertIn(f"#{at}", line, full)
        return outs, line

    def test_rank_in_another_collective(self):
        outs, line = self.misuse("other", 0)
        self.assertIn("AllReduce #12", outs[1])
        self.assertIn("AllGather #12", outs[1])

    def test_rank_that_skipped_a_call(self):
        # Rank 3 skips the last call (#20) and goes to destroy() while the others wait in
        # AllGather #20: its closing barrier is Barrier #20. (A call skipped earlier looks the
        # same at the end: the skipping rank's later calls meet the others' next ones, which
        # have the same shape, and it reaches destroy() one call early.) The others fail;
        # rank 3's destroy() only logs (it cannot throw).
        outs, _ = self.misuse("skip", 3, at=20, calls=20, culprit_may_succeed=True)
        self.assertIn("Barrier #20", outs[3])
        job_outs = [o for r, o in enumerate(outs) if r != 3]
        self.assertTrue(any("Barrier #20" in o for o in job_outs), job_outs)

    def test_mismatched_count(self):
        self.misuse("count", 1)

    def test_broadcast_roots_disagree(self):
        outs, _ = self.misuse("root", 2)
        for r in range(WORLD):
            self.assertIn("mismatched root", outs[r])

    def outside_fault(self, sig, victim):
        job = Job(self.dir, "normal", 10**8, 0, -1)
        time.sleep(4)  # the job is running
        os.kill(job.pids[victim], sig)
        t0 = time.monotonic()
        survivors = [r for r in range(WORLD) if r != victim]
        outs = job.wait(survivors, TIMEOUT_MS / 1000 + 30)
        elapsed = time.monotonic() - t0
        job.kill()
        for r in survivors:
            result, _ = result_line(outs[r], r)
            self.assertTrue(result.startswith("error"), outs[r])
        self.assertLessEqual(elapsed, TIMEOUT_MS / 1000 + 2, f"survivors took {elapsed:.1f} s")
        # The survivors may stand one call apart (a rank that finished its part of call N
        # moves on to N+1): the culprit's line names the call of the rank waiting on it.
        seqs = {m.group(1) for r in survivors
                for m in [re.search(r"AllGather #(\d+)", outs[r])] if m}
        line, full = first_line(self.dir)
        self.assertRegex(line, rf"^culprit: rank {victim} \(host [^,]+, pid {job.pids[victim]}\)",
                         full)
        self.assertTrue(any(f"#{seq}" in line for seq in seqs), (seqs, full))

    def test_stopped_rank(self):
        self.outside_fault(signal.SIGSTOP, 2)

    def test_killed_rank(self):
        self.outside_fault(signal.SIGKILL, 1)

    def test_live_status_of_a_stuck_job(self):
        # SHARC_TRACE_SOCKET: the ranks answer `sharc-trace --live` while the job is stuck,
        # before any timeout (30 s here); the frozen rank cannot answer and is the culprit.
        sockets = os.path.join(self.dir, "sockets")
        job = Job(self.dir, "normal", 10**8, 0, -1,
                  {"SHARC_TRACE_SOCKET": sockets, "SHARC_TIMEOUT_MS": "30000"})
        try:
            time.sleep(4)
            os.kill(job.pids[2], signal.SIGSTOP)
            time.sleep(2.5)  # past the stall probe's threshold
            for p in job.procs:
                self.assertIsNone(p.poll(), "a rank ended before the live query")
            mode = os.stat(glob.glob(os.path.join(sockets, "*.sock"))[0]).st_mode & 0o777
            self.assertEqual(mode, 0o600)
            out = subprocess.run([sys.executable, TOOL, "--live", sockets], capture_output=True,
                                 text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            self.assertRegex(out.stdout.splitlines()[0],
                             rf"^culprit: rank 2 \(host [^,]+, pid {job.pids[2]}\)", out.stdout)
        finally:
            job.kill()

    def test_sigusr1_writes_the_record_and_the_job_goes_on(self):
        job = Job(self.dir, "normal", 10**8, 0, -1, {"SHARC_TRACE_SIGNAL": "1"})
        try:
            time.sleep(4)
            os.kill(job.pids[1], signal.SIGUSR1)
            deadline = time.monotonic() + 10
            while not glob.glob(os.path.join(self.dir, "*rank1.json")):
                self.assertLess(time.monotonic(), deadline, "no record after SIGUSR1")
                time.sleep(0.1)
            with open(glob.glob(os.path.join(self.dir, "*rank1.json"))[0]) as f:
                record = json.load(f)
            self.assertEqual(record["reason"], "signal")
            self.assertEqual(record["pid"], job.pids[1])
            time.sleep(1)
            for p in job.procs:
                self.assertIsNone(p.poll(), "SIGUSR1 stopped the job")
        finally:
            job.kill()

    def test_slow_rank_that_finished_late(self):
        job = Job(self.dir, "slow", 20, 10, 3, {"HANG_DRIVER_DUMP": self.dir})
        outs = job.wait(range(WORLD), 60)
        for r in range(WORLD):
            self.assertEqual(result_line(outs[r], r)[0], "ok", outs[r])
        line, full = first_line(self.dir)
        self.assertRegex(line, rf"^culprit: rank 3 \(host [^,]+, pid {job.pids[3]}\)", full)
        self.assertIn("#10", line, full)


if __name__ == "__main__":
    unittest.main(verbosity=2)
