# Synthetic sharc flight-record dumps (format version 1, docs/hangs.md "Flight record format
# (version 1)") for the analyzer's tests: a job of N ranks, communicators and entries in a few words each.
import json
import os

KEY = "9f3a0c1d2e3f4a5b"
T0 = 1_764_620_000_000_000_000  # CLOCK_REALTIME ns of call #1
SEC = 1_000_000_000


def ent(seq, coll="AllGather", state="completed", peer=None, waiting_for="recv", dtype="float32",
        count=1000, op=None, root=None, internal="", p2p_seq=0, at=None, took=0.1, **extra):
    """One entry; call #seq arrives at T0 + seq s (or `at` s after T0) and takes `took` s.
    peer: the world rank its progress waits on (adds "progress")."""
    t = T0 + int((seq if at is None else at) * SEC)
    done = state in ("completed", "failed")
    e = {"seq": seq, "p2p_seq": p2p_seq, "collective": coll, "internal": internal,
         "dtype": dtype, "count": count,
         "op": op if op is not None or coll not in ("AllReduce", "ReduceScatter") else "sum",
         "root": root, "algorithm": "ring", "chunk_bytes": 1 << 20, "path": "host",
         "state": state, "queued_ns": t, "started_ns": t if state != "queued" else 0,
         "ended_ns": t + int(took * SEC) if done else 0,
         "error": "" if state != "failed" else f"{coll} #{seq}: timed out"}
    if peer is not None:
        e["progress"] = {"ops_done": 2, "ops_total": 6, "waiting_for": waiting_for, "peer": peer,
                         "peer_world_rank": peer, "bytes_received": 4096,
                         "bytes_expected": 12288}
    e.update(extra)
    return e


def history(n, coll="AllGather", first=1, **kw):
    """Calls #first..#n, all completed."""
    return [ent(s, coll, **kw) for s in range(first, n + 1)]


def comm(entries, world_ranks=None, id=0, parent=None, calls=None, last=None, state="ok",
         error=""):
    """A communicator (world_ranks None: the whole job's, filled in by Job.dump); calls and
    last_completed_seq follow from the entries unless given."""
    seqs = [e["seq"] for e in entries if e["seq"] > 0]
    done = [e for e in entries if e["seq"] > 0 and e["state"] == "completed"]
    last_e = max(done, key=lambda e: e["seq"], default=None)
    return {"id": id, "parent": parent, "rank": None,
            "size": len(world_ranks) if world_ranks else None,
            "world_ranks": list(world_ranks) if world_ranks else None, "state": state,
            "error": error,
            "timeout_ms": 8000, "calls": max(seqs, default=0) if calls is None else calls,
            "last_completed_seq": (last_e["seq"] if last_e else 0) if last is None else last,
            "last_completed_ns": last_e["ended_ns"] if last_e else 0, "entries": entries}


class Job:
    """Ranks on hosts node-a (0, 1), node-b (2, 3), ...; pid 1230 + rank."""

    def __init__(self, size=4, key=KEY):
        self.size, self.key = size, key
        self.hosts = [f"node-{chr(ord('a') + r // 2)}" for r in range(size)]
        self.pids = [1230 + r for r in range(size)]
        self.dumps = {}

    def who(self, r):
        return f"{r} (host {self.hosts[r]}, pid {self.pids[r]})"

    def dump(self, rank, comms, reason="timeout", message="", at=100):
        """Rank `rank`'s dump, written `at` s after T0."""
        for c in comms:
            if c["world_ranks"] is None:
                c["world_ranks"], c["size"] = list(range(self.size)), self.size
            c["rank"] = c["world_ranks"].index(rank)
        d = {"format": "sharc-trace", "version": 1, "reason": reason, "message": message,
             "time_ns": T0 + int(at * SEC), "host": self.hosts[rank], "pid": self.pids[rank],
             "world": {"key": self.key, "rank": rank, "size": self.size, "hosts": self.hosts,
                       "pids": self.pids},
             "stall_probe_ms": 1500, "communicators": comms}
        self.dumps[rank] = d
        return d

    def write(self, directory):
        for r, d in self.dumps.items():
            with open(os.path.join(directory, f"sharc-trace-{self.key}-rank{r}.json"), "w") as f:
                json.dump(d, f)
