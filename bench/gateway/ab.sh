#!/usr/bin/env bash
# A change to the gateway measured against the build before it (issue 19):
#
#   bench/gateway/ab.sh NEW OLD
#
# NEW and OLD are tidegpu binaries. Each invocation of run.sh's paired mode
# loads the two at the same time and reports the median ratio of their CPU
# per short POST, but each process has an offset of its own of up to 2 %
# that holds for all its runs (BENCHMARKS.md, session 25: the same binary
# as both reads 0.98x in one invocation and 1.01x in the next). So this
# runs INVOCATIONS pairs of invocations, NEW in the gateway's slot and then
# OLD, and reports NEW's CPU per request over OLD's from each, their
# geometric mean and their spread. A change is resolved when all of them
# lean the same way.
#
# It exits 1 when the geometric mean is over LIMIT (default 1.02: NEW costs
# more than OLD beyond what an A/A run reads, 0.977-1.010 per invocation).
#
# Environment (all optional): INVOCATIONS=2 (pairs of invocations),
# RUNS=5 and DURATION=5s (of each invocation, passed to run.sh),
# MODES=paired (or paired-get), and LIMIT=1.02.
set -euo pipefail
(($# == 2)) || { echo "usage: $0 NEW-BINARY OLD-BINARY" >&2; exit 2; }
new=$1 old=$2
for b in "$new" "$old"; do
	[[ -x $b ]] || { echo "ab.sh: $b is not an executable file" >&2; exit 1; }
done
INVOCATIONS=${INVOCATIONS:-2}
[[ $INVOCATIONS =~ ^[0-9]+$ ]] && ((INVOCATIONS >= 1 && INVOCATIONS <= 20)) || { echo "ab.sh: INVOCATIONS=$INVOCATIONS: want 1 to 20" >&2; exit 1; }
MODES=${MODES:-paired}
[[ $MODES == paired || $MODES == paired-get ]] || { echo "ab.sh: MODES=$MODES: want paired or paired-get" >&2; exit 1; }
LIMIT=${LIMIT:-1.02}
[[ $LIMIT =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "ab.sh: LIMIT=$LIMIT: want a ratio such as 1.02" >&2; exit 1; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# median_of GATEWAY BASE: the median ratio of GATEWAY's CPU per request to
# BASE's in one invocation of run.sh, the two loaded at the same time.
median_of() {
	local out
	out=$(PAIR_PEERS="" MODES=$MODES RUNS=${RUNS:-5} DURATION=${DURATION:-5s} \
		TIDEGPU_BIN=$1 TIDEGPU_BASE_BIN=$2 bash "$here/run.sh" 2>/dev/null)
	# The per-run ratios (three decimals; the table rounds to two).
	awk -F': ' '/per-run gateway \/ base CPU per request:/ {
			n = split($2, r, " "); for (i = 1; i <= n; i++) v[i] = r[i] + 0
			for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
			printf "%.3f\n", n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2; found = 1 }
		END { if (!found) exit 1 }' <<<"$out" || { echo "ab.sh: run.sh gave no ratio; its output:" >&2; echo "$out" >&2; exit 1; }
}

ratios=()
echo "| invocation | NEW in the gateway's slot: NEW / OLD | OLD in the gateway's slot: 1 / (OLD / NEW) |"
echo "|---|---:|---:|"
for i in $(seq 1 "$INVOCATIONS"); do
	echo "# invocation $i/$INVOCATIONS: NEW in the gateway's slot" >&2
	a=$(median_of "$new" "$old")
	echo "# invocation $i/$INVOCATIONS: OLD in the gateway's slot" >&2
	b=$(median_of "$old" "$new")
	b=$(awk -v b="$b" 'BEGIN { printf "%.3f", 1 / b }')
	ratios+=("$a" "$b")
	echo "| $i | $a | $b |"
done
printf '%s\n' "${ratios[@]}" | awk -v limit="$LIMIT" '{ s += log($1); n++; if (n == 1 || $1 < lo) lo = $1; if (n == 1 || $1 > hi) hi = $1 }
	END { printf "\nNEW / OLD, CPU per request: geometric mean %.3f over %d invocations (from %.3f to %.3f)\n", exp(s / n), n, lo, hi
		if (exp(s / n) > limit) { printf "FAIL: NEW costs %.3fx OLD'"'"'s CPU per request, over LIMIT=%s\n", exp(s / n), limit; exit 1 } }'
