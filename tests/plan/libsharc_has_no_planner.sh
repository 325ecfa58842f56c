#!/usr/bin/env bash
# libsharc.so, which every training process loads, exports the runtime and no planner symbol:
# the planner lives in libsharc_plan.so. Usage: libsharc_has_no_planner.sh LIBSHARC LIBSHARC_PLAN
set -euo pipefail
planner='sharc::plan::|[Bb]acktest|[Ss]imulat|[Pp]ublished'
runtime=$(nm -DC --defined-only "$1")
grep -q 'sharc::Communicator::allGather' <<<"$runtime" || { echo "no runtime symbols in $1"; exit 1; }
if grep -E "$planner" <<<"$runtime"; then echo "planner symbols above are in $1"; exit 1; fi
grep -qE "$planner" <(nm -DC --defined-only "$2") || { echo "no planner symbols in $2"; exit 1; }
echo "$1: runtime only; the planner is in $2"
