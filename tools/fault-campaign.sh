#!/usr/bin/env bash
# Fault campaign: randomized trials per fault class, each a job of sharc-perf ranks (one
# process per rank, environment rendezvous) on this host or, with --cluster, on an emulated
# cluster (tools/emulate-cluster.sh: one network namespace per node). Every trial must end
# with correct results (delay, loss, jitter) or an error on every surviving rank within
# SHARC_TIMEOUT_MS + 2 s of the fault, no hang, nothing left behind (/dev/shm segments,
# namespaces), and tools/sharc-trace's first line naming the faulted rank. Prints a table:
# class x trials x outcomes; exits 1 if any trial had a bad outcome, 77 (skip) when --cluster
# cannot make namespaces here.
#
#   tools/fault-campaign.sh [--perf PATH] [--trials N] [--ranks N] [--classes LIST]
#                           [--timeout-ms MS] [--provider P] [--seed S] [--keep DIR]
#                           [--keep-bad DIR] [--cluster NODES]
#
# Classes (SHARC_FAULT at a random rank, collective and `after`): kill, stop, fail, drop,
# delay (the rank's sends wait 5..50 ms in a few calls). With --cluster only: link (eth0 of
# a random node taken down 1..6 s into a longer job), loss (netem loss 1..10 % on every
# node's link), jitter (netem delay 1..20 ms with jitter); loss and jitter are skipped, with
# the reason, when the kernel has no sch_netem. Default classes: kill stop fail drop delay;
# with --cluster NODES (ranks per node as emulate-cluster.sh --nodes takes them, e.g. 3,2;
# or NxM: N nodes of M ranks, 3x2 = 2,2,2): kill stop fail link loss jitter.
# Outcomes per trial:
#   ok        every survivor failed in time (delay/loss/jitter: every rank finished, results
#             correct)
#   late      every survivor failed, one later than timeout + 2 s after the fault (a rank
#             has failed when it dumps its flight record or prints its error; the process
#             may end later, after its communicator's teardown: column max-exit, the
#             latest end of a survivor after the fault, in seconds)
#   no-error  a survivor finished without an error (delay/loss/jitter: a rank failed or a
#             result was wrong)
#   hang      a rank had to be killed (its process outlived the setup + timeout + 30 s)
#   not-fired the fault never fired (the job ended before it, or the call had fewer
#             transfers on that rank than `after`); not counted as bad
#   unfired-error  the fault never fired but a rank failed
#   leak      sharc's /dev/shm segments or the trial's namespaces were left behind
#   crash     a rank crashed (sharc's handler printed "terminated with signal"); both
#             counted on top of the above
#   culprit-right / culprit-wrong / culprit-none: the analyzer's culprits (sharc-trace
#             --json) are exactly the faulted rank / other ranks / none. For link: right =
#             only ranks of the node whose link went down; the others are counted apart and
#             not as bad (the analyzer sees both sides of a cut as waiting on the other).
# --keep DIR keeps every trial's files (stamped stderr, flight records, analysis.txt);
# --keep-bad DIR only those of bad trials. --seed S makes the faults repeatable.
set -u -o pipefail

# Internal: one rank. Runs COMMAND with its stderr lines stamped (seconds since the epoch)
# into DIR/err.R, stdout into DIR/out.R; writes DIR/pid.R, then DIR/rc.R ("status end-time")
# once the command and its stderr are done. R is $SHARC_RANK.
if [ "${1:-}" = --rank-run ]; then
  dir=$2 r=$SHARC_RANK
  shift 2
  { bash -c 'echo $$ > "$0"; exec "$@"' "$dir/pid.$r" "$@" 2>&1 >&3 3>&- |
      while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done > "$dir/err.$r"
  } 3> "$dir/out.$r"
  rc=${PIPESTATUS[0]}
  echo "$rc $EPOCHREALTIME" > "$dir/rc.$r"
  exit "$rc"
fi

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
self="$here/$(basename "$0")"
perf="$root/build/perf/sharc-perf"
emulate="$here/emulate-cluster.sh"
trials=5
ranks=4
classes=""
timeoutMs=4000
provider=""
seed=$RANDOM
keep=""
keepBad=""
cluster=""

usage() { sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --perf) perf=$2; shift 2 ;;
    --trials) trials=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --classes) classes=${2//,/ }; shift 2 ;;
    --timeout-ms) timeoutMs=$2; shift 2 ;;
    --provider) provider=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --keep-bad) keepBad=$2; shift 2 ;;
    --cluster) cluster=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "fault-campaign: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
perf=$(realpath "$perf" 2>/dev/null || echo "$perf")  # the ranks may start elsewhere
[ -x "$perf" ] || { echo "fault-campaign: no sharc-perf at $perf (build it, or pass --perf)" >&2; exit 2; }
nodeRanks=()  # ranks per node (--cluster)
if [[ "$cluster" =~ ^([1-9][0-9]?)x([1-9][0-9]?)$ ]]; then  # NxM: N nodes of M ranks
  cluster=$(printf "${BASH_REMATCH[2]},%.0s" $(seq "${BASH_REMATCH[1]}")); cluster=${cluster%,}
fi
if [ -n "$cluster" ]; then
  IFS=, read -r -a nodeRanks <<<"$cluster"
  ranks=0
  for m in "${nodeRanks[@]}"; do
    [[ "$m" =~ ^[1-9][0-9]?$ ]] || { echo "fault-campaign: bad --cluster '$cluster' (ranks per node, e.g. 2,2)" >&2; exit 2; }
    ranks=$((ranks + m))
  done
  [ -n "$classes" ] || classes="kill stop fail link loss jitter"
else
  [ -n "$classes" ] || classes="kill stop fail drop delay"
fi
for c in $classes; do
  case $c in
    kill|stop|fail|drop|delay) ;;
    link|loss|jitter) [ -n "$cluster" ] || { echo "fault-campaign: class '$c' needs --cluster" >&2; exit 2; } ;;
    *) echo "fault-campaign: unknown class '$c'" >&2; exit 2 ;;
  esac
done
[ "$ranks" -ge 2 ] || { echo "fault-campaign: at least 2 ranks needed" >&2; exit 2; }
RANDOM=$seed
trace="$root/tools/sharc-trace"
work=$(mktemp -d /tmp/fault-campaign.XXXXXX)
cleanup() { [ -n "$keep" ] && { mkdir -p "$keep" && cp -r "$work"/. "$keep"/; }; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

shmSegments() { ls /dev/shm 2>/dev/null | grep '^sharc-' | sort; }
freePort() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rnd() { echo $(( $1 + RANDOM % ($2 - $1 + 1) )); }  # an integer in [$1, $2]
nowUs() { echo "${EPOCHREALTIME/./}"; }

# --cluster: can namespaces be made (else skip), and has the kernel netem (else skip those
# classes, with the reason)?
netemSkip=""
if [ -n "$cluster" ]; then
  bash "$emulate" --nodes 1 --timeout 20 -- true >/dev/null 2>"$work/probe.err"
  rc=$?
  if [ $rc = 77 ]; then
    echo "fault-campaign: SKIP: $(grep -m1 SKIP "$work/probe.err" || echo 'no network namespaces here')"
    exit 77
  fi
  [ $rc = 0 ] || { echo "fault-campaign: emulate-cluster.sh does not work here:" >&2; cat "$work/probe.err" >&2; exit 1; }
  probe="shcfc$$-probe"
  ip netns add "$probe"
  if ! err=$(ip netns exec "$probe" tc qdisc add dev lo root netem delay 1ms 2>&1); then
    netemSkip="no tc netem here ('tc qdisc add ... netem': ${err//$'\n'/ })"
  fi
  ip netns del "$probe"
fi

# One rank on this host, in the background.
runRank() {
  local dir=$1 r=$2 port=$3 iters=$4
  (
    export SHARC_ROOT=127.0.0.1:$port SHARC_RANK=$r SHARC_WORLD_SIZE=$ranks
    export FI_TCP_IFACE=lo SHARC_SOCKET_IFNAME=lo
    exec bash "$self" --rank-run "$dir" "$perf" all_reduce -b 1M -e 1M -n "$iters" -w 1 -c 1
  ) 2>/dev/null &  # (bash's own "Killed" notices for the ranks killed here)
}

# The culprit ranks the analyzer names for DIR/trace (space separated, sorted; "" for none);
# its text goes to DIR/analysis.txt.
culprits() {
  "$trace" "$1/trace" > "$1/analysis.txt" 2>&1
  "$trace" --json "$1/trace" 2>/dev/null | python3 -c '
import json, sys
try:
    print(" ".join(str(r) for r in sorted({c["rank"] for c in json.load(sys.stdin)["culprits"]})))
except Exception:
    print("")'
}

# The fault of the next trial, drawn here (not in the trial's subshell, which bash re-seeds)
# so that --seed repeats a campaign. Sets: fault (SHARC_FAULT), victim (world rank; link:
# node), iters, downAfterMs (link), netem (loss, jitter: the qdisc's parameters).
drawFault() {
  local class=$1 seq after
  victim=$(rnd 0 $((ranks - 1)))
  seq=$(rnd 2 10)
  after=$(rnd 0 "$([ -n "$cluster" ] && echo 3 || echo 2)")  # one host: single-copy reads, few transfers
  iters=12  # timed calls; with the warm-up and the check, the job makes about 15 collectives
  downAfterMs=0 netem=""
  case $class in
    delay) fault="delay:rank=$victim,ms=$(rnd 5 50),seq=$seq-$((seq + $(rnd 0 3)))" ;;
    link) victim=$(rnd 0 $((${#nodeRanks[@]} - 1))); iters=400; downAfterMs=$(rnd 1000 6000)
          fault="" ;;
    loss) netem="loss $(rnd 1 10)%"; fault="" ;;
    jitter) local d; d=$(rnd 1 20); netem="delay ${d}ms $(rnd 0 $(( (d + 1) / 2 )))ms"; fault="" ;;
    *) fault="$class:rank=$victim,seq=$seq,after=$after" ;;
  esac
}

describe() {  # the fault as the trial lines print it
  case $1 in
    link) echo "node $victim eth0 down at +${downAfterMs}ms" ;;
    loss|jitter) echo "netem $netem" ;;
    *) echo "$fault" ;;
  esac
}

# Runs one trial of class $1 into directory $2 (fault drawn by drawFault); prints its
# outcome words (e.g. "ok culprit-right", "late leak").
trial() {
  local class=$1 dir=$2 r
  mkdir -p "$dir"
  local before; before=$(shmSegments)
  export SHARC_TIMEOUT_MS=$timeoutMs SHARC_DEBUG=WARN
  if [ -n "$fault" ]; then export SHARC_FAULT=$fault; else unset SHARC_FAULT; fi
  [ -n "$provider" ] && export SHARC_FI_PROVIDER=$provider
  [ -x "$trace" ] && export SHARC_TRACE_DIR=$dir/trace
  local emuPid="" start; start=$(nowUs)
  if [ -n "$cluster" ]; then
    timeout -s TERM $((timeoutMs / 1000 + 120)) bash "$emulate" --nodes "$cluster" \
      --timeout $((timeoutMs / 1000 + 60)) --names-file "$dir/names" -- \
      bash "$self" --rank-run "$dir" "$perf" all_reduce -b 1M -e 1M -n "$iters" -w 1 -c 1 \
      > "$dir/emulate.log" 2>&1 &
    emuPid=$!
  else
    local port; port=$(freePort)
    for ((r = 0; r < ranks; r++)); do runRank "$dir" $r "$port" "$iters"; done
  fi
  # Wait for every rank but a stopped one; a rank past setup + timeout + 30 s hangs. A link
  # goes down, or netem comes on, along the way.
  local limit=$(( start + (timeoutMs + 30000 + (${cluster:+15000}+0)) * 1000 )) hang=0
  local fired="" upAt="" netemOn=0 setupFailed=0
  while :; do
    local left=0 started=0
    for ((r = 0; r < ranks; r++)); do
      [ -f "$dir/pid.$r" ] && started=$((started + 1))
      [ -f "$dir/rc.$r" ] && continue
      [ "$class" = stop ] && [ $r = "$victim" ] && [ -n "$fired" ] && continue
      left=$((left + 1))
    done
    [ $left = 0 ] && break
    if [ -n "$emuPid" ] && ! kill -0 "$emuPid" 2>/dev/null; then setupFailed=1; break; fi
    if [ -n "$netem" ] && [ $netemOn = 0 ] && [ -f "$dir/names" ]; then
      local ns
      for ns in $(awk '$1 == "node" { print $3 }' "$dir/names"); do
        # shellcheck disable=SC2086  # netem's parameters are words
        ip netns exec "$ns" tc qdisc add dev eth0 root netem $netem limit 100000 \
          >> "$dir/netem.log" 2>&1
      done
      netemOn=1
    fi
    if [ "$class" = link ] && [ -z "$fired" ] && [ $started = "$ranks" ]; then
      [ -n "$upAt" ] || upAt=$(nowUs)
      if [ "$(nowUs)" -ge $((upAt + downAfterMs * 1000)) ]; then
        local ns; ns=$(awk -v n="$victim" '$1 == "node" && $2 == n { print $3 }' "$dir/names")
        fired=$EPOCHREALTIME
        ip netns exec "$ns" ip link set eth0 down
        [ $left -lt "$ranks" ] && fired=""  # a rank had already finished: too late to count
        [ -n "$fired" ] || break
      fi
    fi
    if [ "$class" = stop ] && [ -z "$fired" ]; then
      fired=$(grep -h "SHARC_FAULT rule" "$dir/err.$victim" 2>/dev/null | head -1 | cut -d' ' -f1)
    fi
    if [ "$(nowUs)" -gt $limit ]; then hang=1; break; fi
    sleep 0.1
  done
  # Kill what is left (the stopped rank; hung ranks) by the pids the ranks wrote.
  for ((r = 0; r < ranks; r++)); do
    [ -f "$dir/rc.$r" ] || { [ -f "$dir/pid.$r" ] && kill -KILL "$(cat "$dir/pid.$r")" 2>/dev/null; }
  done
  wait
  case $class in
    link) ;;
    *) fired=$(grep -h "SHARC_FAULT rule" "$dir/err.$victim" 2>/dev/null | head -1 | cut -d' ' -f1) ;;
  esac
  [ -n "$fired" ] && echo "$fired" > "$dir/fired"  # (seconds since the epoch, as the stamps)
  local crashed=""  # sharc's crash handler: "PROGRAM:PID terminated with signal N ..."
  for ((r = 0; r < ranks; r++)); do
    grep -q "terminated with signal" "$dir/err.$r" 2>/dev/null && crashed="$crashed $r"
  done
  local out="" survivors=() rc end
  for ((r = 0; r < ranks; r++)); do
    case $class in
      kill|stop|drop) [ $r = "$victim" ] && continue ;;  # killed, stopped or cut off
    esac
    survivors+=("$r")
  done
  if [ $hang = 1 ]; then
    out="hang"
  elif [ $setupFailed = 1 ]; then
    out="setup-failed"  # emulate-cluster ended before every rank did: see emulate.log
  elif [ "$class" = delay ] || [ "$class" = loss ] || [ "$class" = jitter ]; then
    out="ok"
    if [ "$class" != delay ] && { [ $netemOn = 0 ] || [ -s "$dir/netem.log" ]; }; then
      out="netem-failed"  # the qdisc did not go on: see netem.log
    fi
    for ((r = 0; r < ranks; r++)); do
      rc=$(cut -d' ' -f1 "$dir/rc.$r")
      if [ "$rc" != 0 ] || grep -q "FAILED" "$dir/err.$r"; then out="no-error"; fi
    done
  elif [ -z "$fired" ]; then
    out="not-fired"
    for ((r = 0; r < ranks; r++)); do  # then the job must have succeeded
      [ "$(cut -d' ' -f1 "$dir/rc.$r")" = 0 ] || out="unfired-error"
    done
  else
    out="ok"
    for r in "${survivors[@]}"; do
      read -r rc end < "$dir/rc.$r"
      if [ "$rc" = 0 ]; then out="no-error"; break; fi
      # The call failed when the rank dumped its flight record (written on the failure,
      # before the error returns) or printed the error, whichever came first; the process
      # may end later (its communicator's teardown): that is the exit column.
      local errAt; errAt=$(grep -h -m1 -e "sharc-perf: " -e "flight record written" \
        "$dir/err.$r" | cut -d' ' -f1)
      [ -n "$errAt" ] || errAt=$end
      awk -v e="$end" -v f="$fired" 'BEGIN { printf "%.1f\n", e - f }' >> "$dir/exits"
      if awk -v a="$errAt" -v f="$fired" -v t="$timeoutMs" 'BEGIN { exit !(a - f > t / 1000 + 2) }'; then
        out="late"
      fi
    done
  fi
  # Segments this job's ranks made (sharc-PID-...) and left (other jobs may come and go).
  local leaked=0 seg
  for seg in $(comm -13 <(echo "$before") <(shmSegments)); do
    for ((r = 0; r < ranks; r++)); do
      [ "${seg#sharc-$(cat "$dir/pid.$r" 2>/dev/null)-}" != "$seg" ] && leaked=1
    done
  done
  if [ -f "$dir/names" ]; then  # this trial's namespaces must be gone
    local name
    for name in $(awk '{ print $($1 == "node" ? 3 : 2) }' "$dir/names"); do
      ip netns list 2>/dev/null | grep -qw "$name" && { leaked=1; echo "namespace $name left" >> "$dir/leaks"; }
    done
  fi
  [ $leaked = 0 ] || out="$out leak"
  [ -z "$crashed" ] || { out="$out crash"; echo "$crashed" > "$dir/crashed"; }
  if [ -x "$trace" ] && [ -n "$fired" ] && [ "$out" != hang ]; then
    case $class in
      delay|loss|jitter) ;;
      link)
        local named; named=$([ -d "$dir/trace" ] && culprits "$dir")
        local first=0 n
        for ((n = 0; n < victim; n++)); do first=$((first + nodeRanks[n])); done
        local inNode=1
        for r in $named; do
          [ "$r" -ge $first ] && [ "$r" -lt $((first + nodeRanks[victim])) ] || inNode=0
        done
        if [ -z "$named" ]; then out="$out culprit-none"
        elif [ $inNode = 1 ]; then out="$out culprit-right"
        else out="$out culprit-other"
        fi ;;
      *)
        local named; named=$([ -d "$dir/trace" ] && culprits "$dir")
        if [ -z "$named" ]; then out="$out culprit-none"
        elif [ "$named" = "$victim" ]; then out="$out culprit-right"
        else out="$out culprit-wrong"
        fi ;;
    esac
    [ -n "${named:-}" ] && echo "$named" > "$dir/culprits"
  fi
  echo "$out"
  [ -f "$dir/exits" ] && sort -g "$dir/exits" | tail -1 > "$dir/exit"  # the last survivor's
}

mode=$([ -n "$cluster" ] && echo "emulated cluster $cluster ($ranks ranks)" || echo "one host, $ranks ranks")
echo "# fault campaign: $mode, $trials trials per class, SHARC_TIMEOUT_MS=$timeoutMs, seed $seed"
echo "# perf: $perf${provider:+, provider $provider}"
bad=0
declare -A count took maxExit
for class in $classes; do
  if [ -n "$netemSkip" ] && { [ "$class" = loss ] || [ "$class" = jitter ]; }; then
    echo "$class   skipped: $netemSkip"
    continue
  fi
  took[$class]=0
  for ((t = 1; t <= trials; t++)); do
    drawFault "$class"
    dir="$work/$class.$t"
    t0=$(nowUs)
    o=$(trial "$class" "$dir")
    us=$(( $(nowUs) - t0 ))
    took[$class]=$(( took[$class] + us ))
    extra=""
    case " $o " in
      *" culprit-right "*) ;;
      *" culprit-"*) extra=" ($(head -1 "$dir/analysis.txt" 2>/dev/null | cut -c1-160))" ;;
    esac
    exitS=$(cat "$dir/exit" 2>/dev/null || echo -)  # the last survivor's end after the fault
    [ "$exitS" = - ] || { [ -z "${maxExit[$class]:-}" ] ||
      awk -v a="$exitS" -v b="${maxExit[$class]}" 'BEGIN { exit !(a > b) }'; } && maxExit[$class]=$exitS
    printf '%-6s %3d  %-38s %-28s %5.1fs  exit %6s%s\n' "$class" "$t" "$(describe "$class")" "$o" \
      "$(awk -v u=$us 'BEGIN { print u / 1e6 }')" "$exitS$([ "$exitS" = - ] || echo s)" "$extra"
    for w in $o; do count[$class.$w]=$(( ${count[$class.$w]:-0} + 1 )); done
    case " $o " in
      *" late "*|*" no-error "*|*" hang "*|*" leak "*|*" crash "*|*" setup-failed "*|*" netem-failed "*|*" unfired-error "*|*" culprit-wrong "*)
        bad=$((bad + 1)); isBad=1 ;;
      *" culprit-none "*) [ "$class" = link ] && isBad=0 || { bad=$((bad + 1)); isBad=1; } ;;
      *) isBad=0 ;;
    esac
    [ "$o" = not-fired ] && isBad=1  # (kept to look at; not counted as bad)
    if [ $isBad = 1 ] && [ -n "$keepBad" ]; then
      mkdir -p "$keepBad" && cp -r "$dir" "$keepBad/" && describe "$class" > "$keepBad/$class.$t/fault"
    fi
    [ -n "$keep" ] && describe "$class" > "$dir/fault" || rm -rf "$dir"
  done
done
echo
printf '%-6s %6s %4s %4s %8s %4s %9s %4s %7s %7s %8s\n' class trials ok late no-error hang not-fired leak culprit s/trial max-exit
for class in $classes; do
  [ -n "${took[$class]+x}" ] || { printf '%-6s skipped (%s)\n' "$class" "$netemSkip"; continue; }
  cr=${count[$class.culprit-right]:-0}
  ct=$(( cr + ${count[$class.culprit-wrong]:-0} + ${count[$class.culprit-none]:-0} + ${count[$class.culprit-other]:-0} ))
  case $class in delay|loss|jitter) cu="-" ;; *) cu="$cr/$ct" ;; esac
  [ -x "$trace" ] || cu="-"
  printf '%-6s %6d %4d %4d %8d %4d %9d %4d %7s %7s %8s\n' "$class" "$trials" "${count[$class.ok]:-0}" \
    "${count[$class.late]:-0}" "${count[$class.no-error]:-0}" "${count[$class.hang]:-0}" \
    "${count[$class.not-fired]:-0}" "${count[$class.leak]:-0}" "$cu" \
    "$(awk -v u="${took[$class]}" -v n="$trials" 'BEGIN { printf "%.1f", u / n / 1e6 }')" \
    "${maxExit[$class]:--}"
  for w in crash culprit-wrong culprit-none culprit-other setup-failed netem-failed unfired-error; do
    [ "${count[$class.$w]:-0}" = 0 ] || echo "       $class: $w ${count[$class.$w]}"
  done
done
if [[ " $classes " == *" link "* ]]; then
  echo "(link: culprit right = the analyzer names only ranks of the node whose eth0 went down;"
  echo " culprit-other/none there are counted apart, not as bad)"
fi
[ $bad = 0 ] || { echo "fault-campaign: $bad trial(s) with a bad outcome (late, no-error, hang, leak, crash, setup or netem failure, unfired-error, wrong or no culprit)"; exit 1; }
echo "fault-campaign: every trial ended as required"
