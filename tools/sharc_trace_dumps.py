# The flight-record dumps tools/sharc-trace reads (format version 1, see docs/hangs.md "Flight
# record format (version 1)"), as Python objects: parse, group by world, collect what cannot be read. The analysis
# is sharc_trace_analysis.py. Python 3.11+, standard library only.
import json
import re
from collections import Counter

DUMP_NAME = re.compile(r"^sharc-trace-([0-9A-Za-z]+)-rank(\d+)\.json$")
SOCK_NAME = re.compile(r"^sharc-([0-9A-Za-z]+)-rank(\d+)\.sock$")
FIELDS = ("dtype", "count", "op", "root")  # compared across ranks at one sequence number
MAX_RANKS = 1 << 20  # a larger world.size is garbage, not a job
SHOW_RANKS = 8  # ranks named with host and pid on one culprit line
QUIET_REASONS = ("signal", "request", "live")  # dumps of a job that may be healthy
# Culprit classes, most telling first: a wrong call beats a missing dump beats a lagging rank.
# A rank that failed by itself (an error of its own, not a timeout or a peer's notice) or
# aborted explains the rest better than a rank one call behind when the notice came.
PRIO = {"mismatch": 0, "no-dump": 1, "stopped": 1, "failed": 1.5, "aborted": 1.5, "behind": 2, "skipped": 2,
        "absent": 2, "victim": 3, "stuck": 4, "stalled": 4, "no-dump-unwaited": 5, "cycle": 6, "slow": 7,
        "none": 8}

class BadDump(Exception):
    pass


def _int(v, default=None):
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _str(v, default=""):
    return v if isinstance(v, str) else default


class Entry:
    """One operation of a communicator's flight record."""

    def __init__(self, d):
        if not isinstance(d, dict):
            raise BadDump("an entry is not an object")
        self.seq = max(_int(d.get("seq"), 0), 0)
        self.p2p_seq = _int(d.get("p2p_seq"), 0)
        self.collective = _str(d.get("collective"), "?") or "?"
        self.internal = _str(d.get("internal"))
        self.values = {f: d.get(f) for f in FIELDS}
        self.state = _str(d.get("state"), "?")
        self.queued_ns = _int(d.get("queued_ns"), 0)
        self.started_ns = _int(d.get("started_ns"), 0)
        self.ended_ns = _int(d.get("ended_ns"), 0)
        p = d.get("progress")
        self.progress = p if isinstance(p, dict) else None
        self.error = _str(d.get("error"))
        self.probe = _str(d.get("stall_probe"))

    @property
    def name(self):
        return self.collective + (f" [{self.internal}]" if self.internal else "")

    def arrival(self):
        return self.queued_ns or self.started_ns

    def peer(self):
        v = _int(self.progress.get("peer_world_rank")) if self.progress else None
        return v if v is not None and v >= 0 else None


class Comm:
    """One communicator as one rank recorded it; (id, world_ranks) names it across ranks."""

    def __init__(self, d):
        if not isinstance(d, dict):
            raise BadDump("a communicator is not an object")
        self.id = _int(d.get("id"))
        wr = d.get("world_ranks")
        if self.id is None or not isinstance(wr, list) or not all(_int(x) is not None for x in wr):
            raise BadDump("a communicator without an integer id or world_ranks list")
        self.world_ranks = tuple(wr)
        self.key = (self.id, self.world_ranks)
        self.parent = _int(d.get("parent"))
        self.state = _str(d.get("state"), "?")
        self.error = _str(d.get("error"))
        self.entries, self.bad_entries = [], 0
        for x in d.get("entries") if isinstance(d.get("entries"), list) else []:
            try:
                self.entries.append(Entry(x))
            except BadDump:
                self.bad_entries += 1
        self.by_seq = {e.seq: e for e in self.entries if e.seq > 0}
        done = [e.seq for e in self.by_seq.values() if e.state == "completed"]
        self.calls = _int(d.get("calls"), max(self.by_seq, default=0))
        self.last = _int(d.get("last_completed_seq"), max(done, default=0))
        self.last_ns = _int(d.get("last_completed_ns"), 0)

    def stuck(self):
        """The oldest collective this rank has called and not completed, or None."""
        open_ = [e for e in self.by_seq.values() if e.seq > self.last and e.state != "completed"]
        return min(open_, key=lambda e: e.seq, default=None)

    def open_ops(self):
        s = self.stuck()
        return ([s] if s else []) + [e for e in self.entries if e.seq == 0 and
                                     e.state not in ("completed", "?")]


class Dump:
    """One rank's dump of one world (the communicator made by init and its splits)."""

    def __init__(self, d, source):
        if not isinstance(d, dict) or d.get("format") != "sharc-trace":
            raise BadDump('not a sharc-trace dump (no "format": "sharc-trace")')
        w = d.get("world")
        if not isinstance(w, dict):
            raise BadDump('no "world" object')
        self.key, self.rank = _str(w.get("key")), _int(w.get("rank"))
        self.size = _int(w.get("size"))
        if not self.key or self.size is None or not 1 <= self.size <= MAX_RANKS or \
                self.rank is None or not 0 <= self.rank < self.size:
            raise BadDump("world.key, world.rank or world.size missing or out of range")
        self.source, self.notes = source, []
        hosts, pids = w.get("hosts"), w.get("pids")
        self.hosts = [_str(h, None) for h in hosts] if isinstance(hosts, list) else []
        self.pids = [_int(p) for p in pids] if isinstance(pids, list) else []
        self.host, self.pid = _str(d.get("host"), None), _int(d.get("pid"))
        self.reason, self.message = _str(d.get("reason"), "?"), _str(d.get("message"))
        self.time_ns = _int(d.get("time_ns"), 0)
        if d.get("version") != 1:
            self.notes.append(f"format version {d.get('version')!r}, read as version 1")
        self.comms = []
        for c in d.get("communicators") if isinstance(d.get("communicators"), list) else []:
            try:
                self.comms.append(Comm(c))
            except BadDump as e:
                self.notes.append(f"{e}: skipped")
        bad = sum(c.bad_entries for c in self.comms)
        if bad:
            self.notes.append(f"{bad} malformed entries skipped")

    def waited_s(self, e):
        t = e.started_ns or e.queued_ns
        return (self.time_ns - t) / 1e9 if t and self.time_ns else None


class World:
    """The dumps of one job (one world key) and what is known of its missing ranks."""

    def __init__(self, key):
        self.key, self.size, self.dumps, self.problems = key, 0, {}, []
        self.unreadable = set()

    def add(self, d):
        old = self.dumps.get(d.rank)
        if old is not None:
            newer, other = (d, old) if d.time_ns >= old.time_ns else (old, d)
            self.problems.append({"source": other.source, "error": "another dump of rank "
                                  f"{d.rank} ({newer.source}) is newer: ignored"})
            d = newer
        self.dumps[d.rank] = d
        sizes = Counter(x.size for x in self.dumps.values())
        self.size = max(sizes.items(), key=lambda x: (x[1], x[0]))[0]  # the ranks' majority

    def host(self, r):
        own = self.dumps.get(r)
        if own and own.host:
            return own.host
        return next((d.hosts[r] for d in self.dumps.values() if r < len(d.hosts) and d.hosts[r]),
                    "?")

    def pid(self, r):
        own = self.dumps.get(r)
        if own and own.pid is not None:
            return own.pid
        return next((d.pids[r] for d in self.dumps.values()
                     if r < len(d.pids) and d.pids[r] is not None), "?")

    def who(self, r):
        return f"{r} (host {self.host(r)}, pid {self.pid(r)})"


# ---- reading dumps ---------------------------------------------------------------------------

def parse(data, source):
    """A Dump from bytes, or BadDump saying what is wrong with them."""
    if not data.strip():
        raise BadDump("empty")
    try:
        obj = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadDump("not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise BadDump(f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                      "half-written?") from None
    except RecursionError:
        raise BadDump("JSON nested too deeply") from None
    return Dump(obj, source)


def load(items):
    """Worlds from (source name, bytes or error text) pairs; problems not tied to a world."""
    worlds, loose = {}, []
    for name, data in items:
        m = DUMP_NAME.match(name) or SOCK_NAME.match(name)
        try:
            if isinstance(data, str):
                raise BadDump(data)
            d = parse(data, name)
            worlds.setdefault(d.key, World(d.key)).add(d)
            for n in d.notes:
                worlds[d.key].problems.append({"source": name, "error": n})
        except (BadDump, ValueError, TypeError, AttributeError) as e:
            problem = {"source": name, "error": str(e)}
            if m:  # the name says whose dump it should have been
                w = worlds.setdefault(m.group(1), World(m.group(1)))
                w.problems.append(problem)
                w.unreadable.add(int(m.group(2)))
            else:
                loose.append(problem)
    # A world all of whose files are unreadable has no size; it is reported as a problem only.
    for key in [k for k, w in worlds.items() if not w.dumps]:
        loose.extend(worlds.pop(key).problems)
    return worlds, loose
