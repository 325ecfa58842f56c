#!/usr/bin/env bash
# sharc-plan's command line: JSON that parses and agrees with the text, bad options (exit 2,
# valid values listed), and --plot (exit 77 to skip where /usr/bin/python3 lacks matplotlib).
# usage: test_sharc_plan_cli.sh SHARC_PLAN json|errors|plot|simulate|paths
set -u
plan=$1
mode=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

case $mode in
simulate)
  # The replay beside the model: the same rows as `collective` (algorithm, chunk, time), a
  # replayed time, and the error computed from the two.
  "$plan" simulate --cluster p5.48xlarge --collective reduce_scatter --nodes 2,4 -b 1M -e 64M \
    -f 8 --json >"$tmp/s.json" || fail "simulate --json exit $?"
  "$plan" collective --cluster p5.48xlarge --collective reduce_scatter --nodes 2,4 -b 1M -e 64M \
    -f 8 --json >"$tmp/c.json" || fail "collective --json exit $?"
  python3 - "$tmp/s.json" "$tmp/c.json" <<'PY' || fail "simulate JSON"
import json, sys
s, c = (json.load(open(f))["rows"] for f in sys.argv[1:3])
assert len(s) == len(c) == 6, (len(s), len(c))
for r, m in zip(s, c):
    assert (r["nodes"], r["bytes"], r["algorithm"], r["chunk_bytes"]) == \
        (m["nodes"], m["bytes"], m["algorithm"], m["chunk_bytes"]), (r, m)
    assert abs(r["model_us"] - m["time_us"]) <= 1e-3 * m["time_us"], (r, m)
    assert r["replay_us"] > 0, r
    err = 100 * (r["model_us"] - r["replay_us"]) / r["replay_us"]
    assert abs(r["error_pct"] - err) < 1e-3, r
    # rank 0's fabric: it starts after the build, moves no longer than it lasts, and ends
    # before the call does
    first, last, busy = (r["rank0_fabric_" + k + "_us"] for k in ("first", "last", "busy"))
    assert 0 < first < last <= r["replay_us"] and 0 < busy <= last - first + 1e-6, r
PY
  # --fabric: the same three in the table, idle = last - first - busy
  out=$("$plan" simulate --cluster p5.48xlarge --collective reduce_scatter --nodes 2 -b 64M \
    -e 64M --fabric 2>/dev/null) || fail "simulate --fabric exit $?"
  [[ $out == *lead_us*busy_us*idle_us* ]] || fail "simulate --fabric: no fabric columns: $out"
  python3 - "$tmp/s.json" "$out" <<'PY' || fail "simulate --fabric row"
import json, sys
r = [x for x in json.load(open(sys.argv[1]))["rows"] if x["nodes"] == 2 and x["bytes"] == 64 << 20][0]
row = [l.split() for l in sys.argv[2].splitlines() if l.split()[:1] == ["2"]][0]
lead, busy, idle = map(float, row[-3:])
want = r["rank0_fabric_last_us"] - r["rank0_fabric_first_us"] - r["rank0_fabric_busy_us"]
assert abs(lead - r["rank0_fabric_first_us"]) < 0.06 and abs(busy - r["rank0_fabric_busy_us"]) < 0.06, row
assert abs(idle - want) < 0.11, (row, want)
PY
  out=$("$plan" simulate --cluster p5.48xlarge --nodes 1100 2>&1)
  rc=$?
  [[ $rc == 2 && $out == *"at most 8192 ranks"* ]] || fail "simulate --nodes 1100: exit $rc: $out"
  # Within the ranks, a call whose operations pass the cap gets no replay (nan) and says why.
  out=$("$plan" simulate --cluster p5.48xlarge --collective all_gather --nodes 1024 -b 2G -e 2G \
    2>&1) || fail "simulate over the operations cap: exit $?: $out"
  [[ $out == *"the replay plays at most 80000000"* && $out == *nan* ]] ||
    fail "simulate over the operations cap: $out"
  echo "simulate: OK"
  ;;
paths)
  # Both data paths side by side, with NCCL's published AllGather busbw where it exists (2 and
  # 8 p5 nodes, 32 MiB .. 2 GiB) and the model's (marked *) elsewhere, in the text and the JSON.
  "$plan" collective --cluster p5.48xlarge --collective all_gather --nodes 8 -b 32M -e 2G \
    >"$tmp/p.txt" || fail "collective exit $?"
  for col in direct_bw staged_bw nccl_bw; do
    grep -q "^ *nodes .* $col" "$tmp/p.txt" || fail "no $col column: $(cat "$tmp/p.txt")"
  done
  for pt in 46.29 86.80 143.66 215.43 261.26 224.47 293.71; do  # published, 8 nodes
    grep -q "^ *8 .* $pt\$" "$tmp/p.txt" || fail "published $pt not at the row end: $(cat "$tmp/p.txt")"
  done
  "$plan" collective --cluster p5.48xlarge --collective all_gather --nodes 64 -b 1G -e 1G \
    --path direct >"$tmp/m.txt" || fail "collective --nodes 64 exit $?"
  grep -q "^ *nodes .* x_nccl *nccl_bw\$" "$tmp/m.txt" && grep -q "^ *64 .*x  *[0-9.]*\*\$" "$tmp/m.txt" ||
    fail "no model NCCL busbw (marked *) on 64 nodes: $(cat "$tmp/m.txt")"
  "$plan" collective --cluster p5.48xlarge --collective all_gather --nodes 2,64 -b 32M -e 2G \
    --json >"$tmp/p.json" || fail "collective --json exit $?"
  python3 - "$tmp/p.json" <<'PY' || fail "paths JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["path"] == "both" and d["cluster"]["pcie_gbps"] == 50, d["cluster"]
rows = d["rows"]
assert len(rows) == 2 * 7, len(rows)
for r in rows:
    assert 0 < r["staged_busbw_gbps"] <= r["busbw_gbps"], r
    assert r["staged_busbw_gbps"] <= 50, r
    # NCCL's busbw: published on 2 nodes, sharc's backtested model of NCCL on 64.
    assert r["nccl_busbw_gbps"] > 0, r
    assert r["nccl_published"] == (r["nodes"] == 2), r
    assert (r["nccl_algorithm"] is None) == r["nccl_published"], r
    assert abs(r["x_nccl"] - r["busbw_gbps"] / r["nccl_busbw_gbps"]) < 1e-3 * r["x_nccl"], r
assert [r["nccl_busbw_gbps"] for r in rows if r["nodes"] == 2][0] == 131.3, rows[0]
PY
  "$plan" collective --cluster p4d.24xlarge --collective all_reduce --nodes 2 -b 1G -e 1G \
    --path staged >"$tmp/s.txt" || fail "--path staged exit $?"
  grep -q "staged_bw" "$tmp/s.txt" && ! grep -q "direct_bw" "$tmp/s.txt" && grep -q " 57.17\$" "$tmp/s.txt" ||
    fail "--path staged: $(cat "$tmp/s.txt")"
  "$plan" collective --cluster p5.48xlarge --collective all_gather --nodes 2 -b 1M -e 1M \
    --path direct >"$tmp/d.txt" || fail "--path direct exit $?"
  ! grep -q "staged" "$tmp/d.txt" || fail "--path direct: $(cat "$tmp/d.txt")"
  out=$("$plan" collective --cluster p5.48xlarge --collective all_gather --path host 2>&1)
  [[ $? == 2 && $out == *"valid: direct, staged, both"* ]] || fail "--path host: $out"
  out=$("$plan" collective --this-host --collective all_gather --nodes 2 -e 1M --path staged 2>&1)
  [[ $? == 2 && $out == *"no PCIe rate"* ]] || fail "--this-host --path staged: $out"
  "$plan" collective --this-host --collective all_gather --nodes 2 -e 1M >/dev/null ||
    fail "--this-host without a PCIe rate: exit $?"
  echo "paths: OK"
  ;;
json)
  "$plan" collective --cluster p5.48xlarge --collective all_gather --nodes 1,2,64 \
    -b 1M -e 1G -f 4 --json >"$tmp/c.json" || fail "collective --json exit $?"
  python3 - "$tmp/c.json" <<'PY' || fail "collective JSON"
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
assert d["collective"] == "all_gather" and d["cluster"]["name"] == "p5.48xlarge", d["cluster"]
assert sorted({r["nodes"] for r in rows}) == [1, 2, 64], rows
assert len(rows) == 3 * 6, len(rows)  # 1M, 4M, ..., 1G
for r in rows:
    assert r["ranks"] == 8 * r["nodes"]
    assert 0 < r["busbw_gbps"] <= r["bound_busbw_gbps"] * (1 + 1e-6), r
    assert abs(r["pct_of_bound"] - 100 * r["bound_us"] / r["time_us"]) < 1e-3 * r["pct_of_bound"]
    assert r["algorithm"] in ("ring", "recursive_doubling", "bruck", "hierarchical",
                              "hierarchical_bruck"), r
PY
  # The printed cluster round-trips: `sharc-plan cluster` and the JSON's cluster object,
  # written as a cluster file, predict exactly what the profile does.
  "$plan" cluster --cluster p5.48xlarge >"$tmp/p5.txt" || fail "cluster exit $?"
  python3 - "$tmp/c.json" >"$tmp/p5-json.txt" <<'PY' || fail "cluster object to a file"
import json, sys
for k, v in json.load(open(sys.argv[1]))["cluster"].items():
    print(f"{k} = {v}")
PY
  for f in "$tmp/p5.txt" "$tmp/p5-json.txt"; do
    "$plan" collective --cluster-file "$f" --collective all_gather --nodes 1,2,64 \
      -b 1M -e 1G -f 4 --json >"$tmp/f.json" || fail "collective --cluster-file $f exit $?"
    python3 - "$tmp/c.json" "$tmp/f.json" <<'PY' || fail "cluster file $f predicts otherwise"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["cluster"] == b["cluster"], (a["cluster"], b["cluster"])
assert a["rows"] == b["rows"], [(x, y) for x, y in zip(a["rows"], b["rows"]) if x != y][:2]
PY
  done
  "$plan" fsdp --model llama2-70b --cluster p5.48xlarge --nodes 8 --json >"$tmp/f.json" ||
    fail "fsdp --json exit $?"
  "$plan" fsdp --model llama2-70b --cluster p5.48xlarge --nodes 8 >"$tmp/f.txt" ||
    fail "fsdp exit $?"
  python3 - "$tmp/f.json" "$tmp/f.txt" <<'PY' || fail "fsdp JSON"
import json, sys
d = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read().splitlines()
c, best = d["candidates"], d["recommended"]
assert d["world"] == 64 and c[0] == best, best
fit = [x for x in c if x["fits"]]
assert best["fits"] and all(x["comm_us"] >= best["comm_us"] for x in fit)
first = ("recommended: hybrid_shard_degree=%d tensor_parallel_degree=%d (" %
         (best["hybrid_shard_degree"], best["tensor_parallel_degree"]))
assert text[0].startswith(first) and best["reason"] in text[0], (text[0], first)
PY
  # A custom model and a calibration file (tuner keys) with the memory given.
  printf 'fabric.gbps = 12.5\nfabric.alpha_us = 20\nlocal.gbps = 40\n' >"$tmp/cal.txt"
  "$plan" fsdp --params 1.3e9 --layers 24 --hidden 2048 --seq 2048 --vocab 50257 --tied \
    --calibration "$tmp/cal.txt" --gpu-memory 24 --nodes 4 --json >"$tmp/g.json" ||
    fail "fsdp custom exit $?"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["cluster"]["fabric_gbps"] == 12.5 and d["model"]["tied_embeddings"]' "$tmp/g.json" ||
    fail "custom fsdp JSON"
  # This host: the tuner's parameters, SHARC_TUNER_FILE overriding them.
  printf 'fabric.gbps = 3.5\nlocal.alpha_us = 2.25\n' >"$tmp/tuner.txt"
  SHARC_TUNER_FILE="$tmp/tuner.txt" "$plan" collective --this-host --ranks-per-node 2 \
    --collective all_gather --nodes 2 -b 1M -e 1M --json >"$tmp/h.json" || fail "--this-host exit $?"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d["cluster"]; assert (c["name"], c["fabric_gbps"], c["local_alpha_us"], c["ranks_per_node"], d["rows"][0]["ranks"]) == ("this host", 3.5, 2.25, 2, 4), d' "$tmp/h.json" ||
    fail "--this-host JSON"
  # The backtest: JSON rows whatever its verdict (exit 0 in bounds, 1 out of them).
  "$plan" backtest --json >"$tmp/b.json"
  rc=$?
  [ $rc -le 1 ] || fail "backtest --json exit $rc"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["rows"]' "$tmp/b.json" ||
    fail "backtest JSON"
  ;;
errors)
  expect() {  # expect "message part" command...
    local part=$1; shift
    "$@" >"$tmp/out" 2>&1
    local rc=$?
    [ $rc -eq 2 ] || fail "exit $rc (expected 2) for: $* -- $(cat "$tmp/out")"
    grep -qF -- "$part" "$tmp/out" || fail "'$part' not in: $(cat "$tmp/out")"
  }
  expect "valid: p4d.24xlarge, p5.48xlarge, p5en.48xlarge" "$plan" collective --cluster p6 --collective all_gather
  expect "valid: all_gather, reduce_scatter, all_reduce" "$plan" collective --cluster p5.48xlarge --collective allgather
  expect "valid: llama2-7b, llama2-13b, llama2-70b, gpt-175b" "$plan" fsdp --cluster p5.48xlarge --model llama9 --nodes 2
  expect "unknown option '--node'" "$plan" fsdp --cluster p5.48xlarge --model llama2-7b --node 2
  expect "valid: collective, fsdp, backtest" "$plan" plan
  expect "expected a whole number >= 1" "$plan" fsdp --cluster p5.48xlarge --model llama2-7b --nodes 0
  expect "expected bytes >= 1 with an optional K, M, G or T" "$plan" collective --cluster p5.48xlarge --collective all_gather -b 1Q
  expect "valid: ring, recursive_doubling, bruck, hierarchical, direct" "$plan" collective --cluster p5.48xlarge --collective all_gather --algorithm fast
  expect "cannot read" "$plan" fsdp --cluster-file /nonexistent --model llama2-7b --nodes 1
  printf 'fabric_gbps = 400\nrank_per_node = 8\n' >"$tmp/bad.txt"
  expect "line 2: unknown key 'rank_per_node'" "$plan" collective --cluster-file "$tmp/bad.txt" --collective all_reduce
  "$plan" --help | grep -q "sharc-plan fsdp CLUSTER" || fail "--help"
  ;;
plot)
  /usr/bin/python3 -c 'import matplotlib' 2>/dev/null || { echo "SKIP: no matplotlib"; exit 77; }
  "$plan" collective --cluster p5.48xlarge --collective all_gather --nodes 1,8,64 -b 1M -e 1G \
    --plot "$tmp/p.png" >/dev/null || fail "--plot exit $?"
  [ "$(head -c 8 "$tmp/p.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
    fail "$tmp/p.png is not a PNG"
  ;;
*) fail "mode $mode (expected json, errors, plot, simulate or paths)" ;;
esac
echo PASS
