# The analysis behind tools/sharc-trace: names the rank(s) whose absence or lag explains a
# hang, from the dumps sharc_trace_dumps.py reads. Python 3.11+, standard library only; the
# functions are shared by the file and --live modes.
import json
import re
from collections import Counter

from sharc_trace_dumps import FIELDS, PRIO, QUIET_REASONS, SHOW_RANKS, _int, _str
from sharc_trace_dumps import load  # noqa: F401  (re-exported: sharc-trace imports it from here)

# ---- analysis --------------------------------------------------------------------------------

def ranks_text(rs):
    """'rank 3' / 'ranks 0, 1, 3' / 'ranks 0-5, 7' (runs of four or more shortened)."""
    rs = sorted(set(rs))
    parts, i = [], 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts += [f"{rs[i]}-{rs[j]}"] if j - i >= 3 else [str(r) for r in rs[i:j + 1]]
        i = j + 1
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(parts)


def subj(rs, verb):
    """'rank 1 waits' / 'ranks 0, 2 wait' (verb in its plural form)."""
    return f"{ranks_text(rs)} {verb if len(set(rs)) > 1 else verb + 's'}"


def label(e, comm):
    where = f" on communicator {comm.id}" if comm.parent is not None else ""
    return (f"{e.name} p2p #{e.p2p_seq}" if e.seq == 0 else f"{e.name} #{e.seq}") + where


def _hv(v):
    """A value as a dict key (JSON scalars as they are; anything else as its JSON text)."""
    return v if v is None or isinstance(v, (str, int, float)) else json.dumps(v, sort_keys=True)


def value_text(v):
    return "none" if v is None else str(v)


class Analysis:
    """The culprit(s), the chain of waits, mismatches and positions of one world."""

    def __init__(self, world, slow_s=0.5, min_wait_s=1.0):
        self.w, self.slow_s, self.min_wait_s = world, slow_s, min_wait_s
        self.comms = {}  # (id, world_ranks) -> {world rank: Comm}
        for r, d in sorted(world.dumps.items()):
            for c in d.comms:
                self.comms.setdefault(c.key, {})[r] = c
        self.missing = [r for r in range(world.size) if r not in world.dumps]
        for d in world.dumps.values():
            if d.size != world.size:
                world.problems.append({"source": d.source, "error": f"world.size {d.size} where "
                                       f"the other ranks say {world.size}"})
        self.candidates = []
        self._blame()
        self._edges()
        self._mismatches()
        self._missing()
        self._chain_ends()
        self._fallback()
        self._failures()
        self._stopped()
        self._cycles()
        if not self.candidates:
            self._slow()

    def waiting(self, r, e):
        """Whether rank r's open op e counts as waiting (a live snapshot catches healthy ops)."""
        d = self.w.dumps[r]
        s = d.waited_s(e)
        return d.reason not in QUIET_REASONS or s is None or s >= self.min_wait_s

    def add(self, kind, ranks, pred, seq=None, comm=None, entry=None, waiters=()):
        for r in ranks:
            self.candidates.append({"kind": kind, "rank": r, "pred": pred, "seq": seq,
                                    "comm": comm, "entry": entry, "waiters": sorted(waiters)})

    def _edges(self):
        self.edges, self.out = [], {}
        for key, views in self.comms.items():
            for r, c in views.items():
                for e in c.open_ops():
                    p = e.peer()
                    if p is not None and p != r and p < self.w.size and self.waiting(r, e):
                        ed = {"from": r, "to": p, "comm": c, "entry": e}
                        self.edges.append(ed)
                        self.out.setdefault(r, []).append(ed)
        # For every waiting rank: the ranks at the ends of its chains (no wait of their own).
        self.ends_of = {}
        for r in self.out:
            seen, stack, ends = {r}, [r], set()
            while stack:
                for ed in self.out.get(stack.pop(), []):
                    if ed["to"] not in self.out:
                        ends.add(ed["to"])
                    elif ed["to"] not in seen:
                        seen.add(ed["to"])
                        stack.append(ed["to"])
            self.ends_of[r] = ends
        self.waiters_of = {}
        for r, ends in self.ends_of.items():
            for e in ends:
                self.waiters_of.setdefault(e, set()).add(r)

    def _into(self, r):
        """The op most of r's direct waiters wait in: (comm, entry)."""
        eds = [ed for ed in self.edges if ed["to"] == r]
        top = Counter((ed["comm"].key, ed["entry"].seq, ed["entry"].p2p_seq) for ed in eds)
        k = top.most_common(1)[0][0]
        ed = next(ed for ed in eds if (ed["comm"].key, ed["entry"].seq, ed["entry"].p2p_seq) == k)
        return ed["comm"], ed["entry"]

    def _mismatches(self):
        self.mismatches, first = [], {}
        for key, views in sorted(self.comms.items()):
            for s in sorted(set().union(*(c.by_seq for c in views.values()))):
                have = {r: c.by_seq[s] for r, c in sorted(views.items()) if s in c.by_seq}
                if len(have) < 2:
                    continue
                if len({e.name for e in have.values()}) > 1:
                    fields = [("collective", lambda e: e.name)]
                else:
                    fields = [(f, lambda e, f=f: _hv(e.values[f])) for f in FIELDS]
                diff = []
                for f, get in fields:
                    groups = {}
                    for r, e in have.items():
                        groups.setdefault(get(e), []).append(r)
                    if len(groups) > 1:
                        diff.append((f, get))
                        self.mismatches.append({
                            "communicator": key[0], "world_ranks": list(key[1]), "seq": s,
                            "field": f, "values": [{"value": v, "ranks": rs}
                                                   for v, rs in groups.items()]})
                if diff and key not in first:
                    first[key] = (s, have, diff)
        for key, (s, have, diff) in first.items():
            groups = {}
            for r, e in have.items():
                groups.setdefault(tuple(get(e) for _, get in diff), []).append(r)
            # The majority; on a tie (ranks still behind have not made the call yet), the
            # value the ranks used in their earlier calls (training loops repeat their calls).
            def usual(value, s=s, diff=diff, key=key):
                return sum(1 for c in self.comms[key].values() for q, e in c.by_seq.items()
                           if q < s and tuple(get(e) for _, get in diff) == value)
            ref = groups[max(groups, key=lambda v: (len(groups[v]), usual(v), -groups[v][0]))]
            re_, rc = have[ref[0]], self.comms[key][ref[0]]
            for rs in groups.values():
                if rs is ref:
                    continue
                e, c = have[rs[0]], self.comms[key][rs[0]]
                if diff[0][0] == "collective":
                    pred = f"called {label(e, c)} where {ranks_text(ref)} called {label(re_, rc)}"
                else:
                    mine = ", ".join(f"{f} {value_text(get(e))}" for f, get in diff)
                    theirs = ", ".join(f"{f} {value_text(get(re_))}" for f, get in diff)
                    pred = (f"called {label(e, c)} with {mine} where {ranks_text(ref)} called it "
                            f"with {theirs}")
                self.add("mismatch", rs, pred, s, c, e)

    def _stuck_in(self, ranks_in, key=None):
        """Ranks with an open collective (in communicator key, or any containing ranks_in)."""
        found = []
        for k, views in self.comms.items():
            if (key is None and set(ranks_in) & set(k[1])) or k == key:
                for r, c in views.items():
                    s = c.stuck()
                    if s and self.waiting(r, s):
                        found.append((r, c, s))
        return found

    def _local_failure(self, d):
        """(comm, entry) of the failed call of a rank that failed by itself, else (None, None)."""
        if d.reason not in ("failure", "abort"):
            return None, None
        failed = [(c, e) for c in d.comms for e in c.entries if e.state == "failed"]
        return min(failed, key=lambda x: x[1].ended_ns or 0, default=(None, None))

    def _blame(self):
        """Which world ranks each local failure names ("peer 3", "rank 3" in its communicator):
        a rank whose error names a rank that wrote no dump, or that failed by itself too,
        failed because of it (killed peer, dropped endpoint) and is a victim, not a culprit."""
        self.blames, self.failed_on = {}, {}
        for r, d in sorted(self.w.dumps.items()):
            c, e = self._local_failure(d)
            if e is None or d.reason != "failure":
                continue
            text = (e.error or d.message) if e else d.message
            named = set()
            for m in re.finditer(r"\b(?:peer|rank) (\d+)\b", text.split(": ", 1)[-1]):
                k = int(m.group(1))
                if 0 <= k < len(c.world_ranks) and c.world_ranks[k] != r:
                    named.add(c.world_ranks[k])
            self.blames[r] = named
        local = set(self.blames)

        def ended(rank):  # when rank's earliest failed call ended (None: no failed call)
            d = self.w.dumps.get(rank)
            ends = [e.ended_ns for c in (d.comms if d else []) for e in c.entries
                    if e.state == "failed" and e.ended_ns]
            return min(ends, default=None)

        for r, named in self.blames.items():
            mine = ended(r)
            for b in named:
                theirs = ended(b)
                # b wrote nothing, failed by itself too (and does not name r), or had failed
                # already (a notice ended it, then its process went away): r failed on b.
                if b in self.missing or (b in local and r not in self.blames.get(b, ())) or \
                        (theirs is not None and mine is not None and theirs < mine):
                    self.failed_on.setdefault(b, []).append(r)

    def _victim(self, r):
        return any(r in rs for rs in self.failed_on.values())

    def _missing(self):
        have_edges = {ed["comm"].key for ed in self.edges}
        for m in self.missing:
            if m in self.failed_on:
                rs = sorted(self.failed_on[m])
                d = self.w.dumps[rs[0]]
                c, e = self._local_failure(d)
                self.add("no-dump", [m], f"produced no dump; {subj(rs, 'fail')} on it in "
                         f"{label(e, c)}", e.seq, c, e, rs)
                continue
            if m in self.waiters_of:
                c, e = self._into(m)
                self.add("no-dump", [m], "produced no dump; it is the peer that "
                         f"{subj(self.waiters_of[m], 'wait')} on in {label(e, c)}",
                         e.seq, c, e, self.waiters_of[m])
                continue
            # No rank says it waits on m: those stuck where m belongs and say nothing of peers.
            stuck = [x for x in self._stuck_in([m]) if x[1].key not in have_edges]
            if stuck:
                top = Counter((c.key, e.seq) for _, c, e in stuck).most_common(1)[0][0]
                r0, c, e = next(x for x in stuck if (x[1].key, x[2].seq) == top)
                rs = [r for r, c2, e2 in stuck if (c2.key, e2.seq) == top]
                self.add("no-dump", [m], f"produced no dump; {subj(rs, 'wait')} in "
                         f"{label(e, c)}", e.seq, c, e, rs)
            else:
                self.add("no-dump" if not self.edges else "no-dump-unwaited", [m],
                         "produced no dump", None)

    def _doing(self, r):
        ops = [(c, c.stuck()) for c in self.w.dumps[r].comms if c.stuck()]
        return f"; it is in {label(ops[0][1], ops[0][0])}" if ops else ""

    def _judge(self, r, c_w, e, waiters):
        """Why present rank r, whom `waiters` wait on in op e of communicator c_w, is not there."""
        c = self.comms.get(c_w.key, {}).get(r)
        if c is None:
            self.add("absent", [r], f"has no communicator {c_w.id} (world ranks "
                     f"{', '.join(map(str, c_w.world_ranks))}): not created yet, or destroyed; "
                     f"{subj(waiters, 'wait')} on it in {label(e, c_w)}", e.seq, c_w, e, waiters)
        elif e.seq == 0:
            mine = [x for x in c.open_ops() if x.seq == 0]
            if mine:
                self._stuck(r, c, mine[0], waiters)
            else:
                self.add("behind", [r], f"has not joined {label(e, c_w)} that "
                         f"{subj(waiters, 'wait')} in (last completed #{c.last}){self._doing(r)}",
                         0, c_w, e, waiters)
        elif c.calls < e.seq:
            self.add("behind", [r], f"{{is}} behind: last completed #{c.last}, "
                     f"{subj(waiters, 'wait')} in {label(e, c_w)}{self._doing(r)}", e.seq, c_w,
                     e, waiters)
        elif c.last >= e.seq:
            mine, now = c.by_seq.get(e.seq, e), c.stuck()
            nxt = f"to {label(now, c)}" if now else f"(last completed #{c.last})"
            self.add("skipped", [r], f"skipped a call: it completed {label(mine, c)} and went on "
                     f"{nxt} while {subj(waiters, 'still wait')} in {label(e, c_w)}", e.seq, c,
                     mine, waiters)
        elif c.by_seq.get(e.seq) is None or c.by_seq[e.seq].name == e.name:
            self._stuck(r, c, c.by_seq.get(e.seq) or c.stuck(), waiters)
        # else: a different call at the same sequence number, which _mismatches reports.

    def _stuck(self, r, c, e, waiters):
        if e is None:
            return
        p, d = e.progress or {}, self.w.dumps[r]
        wf = _str(p.get("waiting_for"))
        bits = [e.state] + ([f"waiting for {wf}"] if wf else [])
        if _int(p.get("ops_total")):
            bits.append(f"step {_int(p.get('ops_done'), '?')}/{p['ops_total']}")
        if d.waited_s(e) is not None:
            bits.append(f"{d.waited_s(e):.1f} s")
        what = f"failed in {label(e, c)}: {e.error[:200]}" if e.state == "failed" and e.error \
            else f"{{is}} stuck in {label(e, c)} ({', '.join(bits)})"
        self.add("stuck", [r], f"{what}; {subj(waiters, 'wait')} on it", e.seq, c, e, waiters)

    def _chain_ends(self):
        for r, waiters in sorted(self.waiters_of.items()):
            if r in self.w.dumps:
                c, e = self._into(r)
                self._judge(r, c, e, waiters)

    def _fallback(self):
        """Communicators whose open ops say nothing of peers: judge by sequence numbers."""
        have_edges = {ed["comm"].key for ed in self.edges}
        for key, views in self.comms.items():
            stuck = [(r, c, c.stuck()) for r, c in views.items()
                     if c.stuck() and self.waiting(r, c.stuck())]
            if key in have_edges or not stuck:
                continue
            # The call most ranks are stuck in (the lowest of equals) is the one that hangs.
            s = min(Counter(e.seq for _, _, e in stuck).most_common(),
                    key=lambda x: (-x[1], x[0]))[0]
            r0, c0, e0 = next(x for x in stuck if x[2].seq == s)
            waiters = [r for r, _, e in stuck if e.seq == s]
            lagging = [r for r in key[1] if r in self.w.dumps and r not in waiters and
                       (r not in views or views[r].calls < s)]
            for r in lagging:
                self._judge(r, c0, e0, waiters)
            ahead = [r for r, c in views.items() if c.last >= s]
            if not lagging and ahead and len(ahead) < len(waiters) and \
                    not set(key[1]) & set(self.missing):
                for r in ahead:
                    self._judge(r, c0, e0, waiters)

    def _failures(self):
        # A failure half a second or more after another rank's own failure is taken as its
        # consequence (a peer that went away meanwhile: broken pipe, no such process).
        ends = [e.ended_ns for d in self.w.dumps.values() if d.reason == "failure"
                for _, e in [self._local_failure(d)] if e is not None and e.ended_ns]
        first_end = min(ends, default=None)
        for r, d in sorted(self.w.dumps.items()):
            if d.reason not in ("failure", "abort"):
                continue
            c, e = self._local_failure(d)
            late = (d.reason == "failure" and e is not None and e.ended_ns and first_end and
                    e.ended_ns - first_end >= 500_000_000)
            err = (e.error if e else "") or d.message
            if d.reason == "abort":
                pred = "aborted" + (f" in {label(e, c)}" if e else "") + " (Communicator::abort)"
            else:
                pred = (f"failed in {label(e, c)}" if e else "failed") + f": {err[:200]}"
            kind = ("aborted" if d.reason == "abort" else
                    "victim" if self._victim(r) or late else "failed")
            self.add(kind, [r], pred, e.seq if e else None, c, e)

    STOPPED = re.compile(r"world rank (\d+), pid \d+\) did not answer the stall probe: "
                         r"its process is stopped")

    def _stopped(self):
        """Ranks a peer's stall probe found stopped (SIGSTOP, a debugger): the cause of the
        wait, even where the stopped rank later ran on and wrote a timeout dump of its own (the
        launcher's SIGCONT before killing it) and the waits then look like a cycle."""
        found = {}  # stopped world rank -> [(reporter, comm, entry)]
        for r, d in sorted(self.w.dumps.items()):
            for c in d.comms:
                for e in c.entries:
                    for m in self.STOPPED.finditer(" ".join([e.error or "", e.probe or ""])):
                        found.setdefault(int(m.group(1)), []).append((r, c, e))
            for m in self.STOPPED.finditer(d.message):
                if int(m.group(1)) not in found:
                    c, e = self._local_failure(d)
                    if e is not None:
                        found.setdefault(int(m.group(1)), []).append((r, c, e))
        for s, seen in sorted(found.items()):
            reporters = sorted({r for r, _, _ in seen if r != s})
            if not reporters:
                continue
            _, c, e = min(seen, key=lambda x: (x[2].seq, x[0]))
            self.add("stopped", [s], f"was stopped (its process did not run): the stall probe of "
                     f"{ranks_text(reporters)} found it so in {label(e, c)}", e.seq, c, e,
                     reporters)

    def _cycles(self):
        cyc = sorted(r for r, ends in self.ends_of.items() if not ends)
        self.cycles, done = [], set()
        for start in cyc:
            if start in done:
                continue
            path, r = [start], start  # walk first edges until a rank repeats
            while True:
                r = next((ed["to"] for ed in self.out[r] if not self.ends_of[ed["to"]]), None)
                if r is None or r in path:
                    break
                path.append(r)
            loop = path[path.index(r):] + [r] if r in path else path
            done.update(path)
            self.cycles.append(loop)
            members = sorted(set(loop))
            e, c = self.out[loop[0]][0]["entry"], self.out[loop[0]][0]["comm"]
            chain = " -> ".join(map(str, loop))
            last = {}
            for m in members:
                ed = self.out[m][0]
                t = _int((ed["entry"].progress or {}).get("last_progress_ns"))
                if t:
                    last[m] = t
            if len(last) == len(members):
                first = min(members, key=lambda m: (last[m], m))
                if len(loop) > 1 and loop[0] == loop[-1]:  # show the loop from that rank
                    i = loop.index(first)
                    chain = " -> ".join(map(str, loop[i:-1] + loop[:i + 1]))
                d = self.w.dumps[first]
                ago = f" for {(d.time_ns - last[first]) / 1e9:.1f} s" if d.time_ns else ""
                self.add("stalled", [first], f"stopped making progress first: nothing moved in "
                         f"{label(e, c)}{ago}; {subj(set(members) - {first}, 'wait')} on it in a "
                         f"cycle ({chain})", e.seq, c, e, set(members) - {first})
            else:
                self.add("cycle", members, f"wait on each other in {label(e, c)} ({chain}); none "
                         "is missing, behind or in another call", e.seq, c, e, members)

    def _slow(self):
        best = None
        for key, views in self.comms.items():
            if len(views) < max(2, len(key[1])):
                continue
            common = set.intersection(*(set(c.by_seq) for c in views.values()))
            for s in common:
                es = {r: c.by_seq[s] for r, c in views.items()}
                if any(e.state != "completed" or not e.arrival() for e in es.values()):
                    continue
                order = sorted(es, key=lambda r: es[r].arrival())
                late, lag = order[-1], es[order[-1]].arrival() - es[order[-2]].arrival()
                others = order[:-1]
                if all(es[r].ended_ns >= es[late].arrival() for r in others) and \
                        (best is None or lag > best[0]):
                    best = (lag, late, views[late], es[late], others)
        if best and best[0] >= self.slow_s * 1e9:
            lag, late, c, e, others = best
            self.add("slow", [late], f"{{is}} a slow rank: it started {label(e, c)} late by "
                     f"{lag / 1e9:.2f} s and {ranks_text(others)} waited for it", e.seq, c, e,
                     others)

    # ---- the report --------------------------------------------------------------------------

    def culprit_lines(self):
        """[(line, candidates)]: the culprits ("culprit: ...") and lesser findings ("also: ...")."""
        best = {}
        for cand in self.candidates:  # one class per rank: its most telling one
            b = best.get(cand["rank"])
            if b is None or PRIO[cand["kind"]] < PRIO[b["kind"]]:
                best[cand["rank"]] = cand
        ranked = sorted(best.values(), key=lambda c: (PRIO[c["kind"]], -len(c["waiters"]),
                                                     c["seq"] or 0, c["rank"]))
        merged = {}
        for cand in ranked:  # ranks with the same story share one line
            merged.setdefault((cand["kind"], cand["pred"]), []).append(cand)
        lines = []
        for (kind, pred), cands in merged.items():
            rs = [c["rank"] for c in cands]
            who = ("rank " if len(rs) == 1 else "ranks ") + ", ".join(
                self.w.who(r) for r in rs[:SHOW_RANKS])
            if len(rs) > SHOW_RANKS:
                who += f" and {len(rs) - SHOW_RANKS} more ({ranks_text(rs[SHOW_RANKS:])[6:]})"
            if kind == "cycle":
                who = "none found: " + ranks_text(rs)
            tag = "culprit" if PRIO[kind] == PRIO[ranked[0]["kind"]] else "also"
            lines.append((f"{tag}: {who} " + pred.replace("{is}", "is" if len(rs) == 1
                                                          else "are"), cands))
        if not lines:
            stuck = [(r, c, c.stuck()) for k, views in sorted(self.comms.items())
                     for r, c in sorted(views.items()) if c.stuck()]
            waiting = [x for x in stuck if self.waiting(*x[::2])]
            if waiting:
                r, c, e = waiting[0]
                lines.append((f"culprit: none found: {subj([x[0] for x in waiting], 'wait')} in "
                              f"{label(e, c)} and no rank is missing, behind or in another call",
                              []))
            elif stuck:  # a live look at a job that moves
                r, c, e = stuck[0]
                lines.append((f"culprit: none: no call has waited {self.min_wait_s:g} s or more "
                              f"({ranks_text([x[0] for x in stuck])} in {label(e, c)})", []))
            else:
                lines.append(("culprit: none: every rank completed every call it made", []))
        return lines

    def result(self):
        lines, w = self.culprit_lines(), self.w

        def culprit(c, line):
            return {"rank": c["rank"], "host": w.host(c["rank"]), "pid": w.pid(c["rank"]),
                    "seq": c["seq"], "communicator": c["comm"].id if c["comm"] else None,
                    "collective": c["entry"].name if c["entry"] else None,
                    "reason": c["kind"].replace("-unwaited", ""), "waiters": c["waiters"],
                    "message": line}
        # Ranks in a wait cycle are listed under "also": none of them is known to be the cause.
        culprits = [culprit(c, ln) for ln, cs in lines if ln.startswith("culprit:")
                    for c in cs if c["kind"] != "cycle"]
        also = [culprit(c, ln) for ln, cs in lines
                for c in cs if ln.startswith("also:") or c["kind"] == "cycle"]
        chain = []
        for ed in self.edges:
            e, p, d = ed["entry"], ed["entry"].progress, w.dumps[ed["from"]]
            num = {k: _int(p.get(k)) for k in ("ops_done", "ops_total", "bytes_received",
                                                "bytes_expected")}
            chain.append({"rank": ed["from"], "waits_on": ed["to"], "communicator": ed["comm"].id,
                          "seq": e.seq, "p2p_seq": e.p2p_seq, "collective": e.name,
                          "state": e.state, "waiting_for": _str(p.get("waiting_for"), None),
                          **num, "waited_s": d.waited_s(e),
                          "stall_probe": e.probe or None, "to_has_dump": ed["to"] in w.dumps})
        last = []
        for key, views in sorted(self.comms.items()):
            any_c = next(iter(views.values()))
            rows = []
            for r in key[1]:
                c, d = views.get(r), w.dumps.get(r)
                rows.append({"rank": r, "has_dump": d is not None, "last_completed_seq":
                             c.last if c else None, "calls": c.calls if c else None,
                             "state": c.state if c else None,
                             "last_completed_s_ago": round((d.time_ns - c.last_ns) / 1e9, 3)
                             if c and d and c.last_ns and d.time_ns else None})
            last.append({"communicator": key[0], "parent": any_c.parent,
                         "world_ranks": list(key[1]), "ranks": rows})
        return {"key": w.key, "size": w.size, "summary": lines[0][0],
                "culprit_lines": [ln for ln, _ in lines], "culprits": culprits, "also": also,
                "chain": chain, "chains": self.chains(),
                "mismatches": self.mismatches, "last_completed": last,
                "ranks_without_dump": self.missing,
                "dumps": [{"rank": r, "host": w.host(r), "pid": w.pid(r), "reason": d.reason,
                           "message": d.message, "time_ns": d.time_ns, "source": d.source}
                          for r, d in sorted(w.dumps.items())],
                "problems": w.problems,
                "newest_ns": max((d.time_ns for d in w.dumps.values()), default=0)}

    def chains(self):
        """Who waits on whom, as paths from ranks nobody waits on to the ends (or a loop)."""
        targets = {ed["to"] for ed in self.edges}
        paths = []
        for r in sorted(self.out):
            if r in targets:
                continue
            path = [r]
            while path[-1] in self.out:
                nxt = self.out[path[-1]][0]["to"]
                path.append(nxt)
                if nxt in path[:-1]:
                    break
            paths.append(path)
        return paths + [c for c in self.cycles if c not in paths]


def analyze(worlds, loose, slow_s=0.5, min_wait_s=1.0):
    """The analysis of every world, the most telling first, as one JSON-ready object."""
    res = [Analysis(w, slow_s, min_wait_s).result() for w in worlds.values()]
    res.sort(key=lambda r: (r["summary"].startswith("culprit: none"), -r["newest_ns"],
                            r["key"]))
    top = res[0]
    return {"format": "sharc-trace-analysis", "version": 1, "summary": top["summary"],
            "culprits": top["culprits"], "also": top["also"], "chain": top["chain"],
            "mismatches": top["mismatches"], "last_completed": top["last_completed"],
            "worlds": res, "problems": loose}
