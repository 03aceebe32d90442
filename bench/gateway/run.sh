#!/usr/bin/env bash
# Side-by-side benchmark of reverse-proxy overhead on this machine (issue 2):
# HAProxy, nginx and `tidegpu gateway`, each in front of the same tiny nginx
# backend, plus wrk straight to that backend as the baseline.
#
#   bench/gateway/run.sh
#
# Everything listens on 127.0.0.1 only, every config and result lives in a
# fresh temp dir, and every process started here is killed on exit.
#
# Environment (all optional):
#   DURATION=10s      wrk -d, per run
#   CONNECTIONS=64    wrk -c
#   THREADS=2         wrk -t
#   RUNS=3            runs per target; targets are interleaved, every other
#                     run in the reverse order (A B C D, D C B A, ...), since
#                     the same build reads up to 10 % apart by its place in
#                     the order alone; the median of the runs is reported
#   WARMUP=2s         an unreported wrk run against each target first
#   MODES="get post"  get:  GET /api/tags, no body
#                     post: POST /api/chat with a 118-byte JSON body
#                     paced: post, but each connection waits PACE_MS after
#                     each answer before its next request, so that every
#                     target carries about the same load (64 connections,
#                     4 ms: about 13,000 req/s here) and CPU per request is
#                     compared at equal load instead of at each one's own
#                     saturation, where a slower proxy also pays for waking
#                     peers that had gone idle
#                     paired: post, but the gateway and one peer proxy
#                     (HAProxy, then nginx) are loaded at the same time,
#                     each by its own wrk with half the threads and
#                     connections, so that both meet the same machine at
#                     the same moment: what else runs here (other tenants
#                     of a shared host move a proxy's CPU per request by
#                     30 % from one run to the next) weighs on both alike,
#                     and the ratio of their CPU per request holds from run
#                     to run where the one-at-a-time modes' does not; the
#                     run fails (exit 1, after every table) if the median
#                     ratio to HAProxy is over issue 19's limit of 1.5x
#                     paired-get: paired, with GET /api/tags instead of
#                     the POST (issue 19 asks for both)
#   PACE_MS=4         the pause of paced
#   PROMPT_BYTES=0    the POSTs' prompt, in bytes (post, paced, paired):
#                     0 is one short sentence (a 118-byte body); an LLM
#                     request's prompt is often kilobytes, and a proxy that
#                     parses or copies it pays per byte where one that
#                     forwards it does not (4096: a 4.2 KB body)
#   PROMPT_DISTINCT=0 1: every request's prompt begins with a number of its
#                     own (its length unchanged), so that no two requests
#                     share a prefix block, as LLM traffic mostly does not;
#                     0: every request carries the same prompt, whose
#                     blocks a prefix-aware gateway then finds already held
#   BACKENDS=1        backends behind every proxy: one nginx worker listening on
#                     that many ports, each proxy's pool holding them all
#                     (HAProxy leastconn, nginx round-robin, the gateway's
#                     default policy), so that what a proxy's balancing costs
#                     per request as its pool grows is measured; the baseline
#                     loads the first port
#   TIDEGPU_BIN=path  a prebuilt tidegpu binary (default: go build ./cmd/tidegpu)
#   TIDEGPU_BASE_BIN=path
#                     another tidegpu binary (say, main's), run as a third
#                     peer of paired: a change to the gateway measured
#                     against the build before it, loaded at the same time,
#                     where two one-at-a-time runs minutes apart differ by
#                     more than most changes are worth. Each process has an
#                     offset of its own of up to 2 % that holds for all its
#                     runs (the same binary as both reads 0.98x in one
#                     invocation, 1.01x in the next): read an A/B from both
#                     orders, the two binaries swapped, as the geometric
#                     mean of new/old and 1/(old/new); bench/gateway/ab.sh
#                     does that
#   FLOORS=""         enginefloor engines (bench/gateway/enginefloor: loop,
#                     corolocked, coro, raw, h1pass, h1server, h1, fasthttp,
#                     nethttp) run as more targets of the one-at-a-time
#                     modes, each a bare proxy to the first backend: the
#                     floor of each concurrency model and engine in the
#                     same runs as HAProxy and the gateway, read as req/s
#                     against HAProxy's in the same run (item 3 of issue 19
#                     is a one-at-a-time req/s goal, which paired CPU per
#                     request does not tell)
#   PAIR_PEERS="haproxy nginx"
#                     the peer proxies of the paired modes (any of haproxy
#                     and nginx, or none when TIDEGPU_BASE_BIN is set: the
#                     gateway against its base alone, a third of the time)
#
# Needs: go, nginx, haproxy, wrk, curl. Nothing needs root.
set -euo pipefail

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
WARMUP=${WARMUP:-2s}
MODES=${MODES:-get post}
PACE_MS=${PACE_MS:-4}
PROMPT_BYTES=${PROMPT_BYTES:-0}
PROMPT_DISTINCT=${PROMPT_DISTINCT:-0}
BACKENDS=${BACKENDS:-1}
PAIR_PEERS=${PAIR_PEERS-haproxy nginx}
for p in $PAIR_PEERS; do
	[[ $p == haproxy || $p == nginx ]] || { echo "run.sh: PAIR_PEERS=$PAIR_PEERS: want haproxy, nginx, both or none" >&2; exit 1; }
done
[[ -n $PAIR_PEERS || -n ${TIDEGPU_BASE_BIN:-} ]] || { echo "run.sh: PAIR_PEERS is empty: name haproxy or nginx, or set TIDEGPU_BASE_BIN" >&2; exit 1; }
[[ $BACKENDS =~ ^[0-9]+$ ]] && ((BACKENDS >= 1 && BACKENDS <= 64)) || { echo "run.sh: BACKENDS=$BACKENDS: want a number of backends from 1 to 64" >&2; exit 1; }
FLOORS=${FLOORS:-}
for e in $FLOORS; do
	[[ $e =~ ^(loop|corolocked|coro|raw|h1pass|h1server|h1|fasthttp|nethttp)$ ]] || { echo "run.sh: FLOORS=$FLOORS: $e is not an enginefloor engine (want loop, corolocked, coro, raw, h1pass, h1server, h1, fasthttp or nethttp)" >&2; exit 1; }
done
[[ $PROMPT_DISTINCT == [01] ]] || { echo "run.sh: PROMPT_DISTINCT=$PROMPT_DISTINCT: want 0 (one prompt for all) or 1 (a prompt of its own per request)" >&2; exit 1; }
[[ $PROMPT_BYTES =~ ^[0-9]+$ ]] && ((PROMPT_BYTES <= 65536)) || { echo "run.sh: PROMPT_BYTES=$PROMPT_BYTES: want a number of bytes from 0 to 65536" >&2; exit 1; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

for tool in go nginx haproxy wrk curl; do
	command -v "$tool" >/dev/null 2>&1 || { echo "run.sh: $tool not found in PATH" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tidegpu-gwbench.XXXXXX")
results="$tmp/results"
mkdir -p "$results" "$tmp/nginx-backend" "$tmp/nginx-proxy"

pids=()
cleanup() {
	local status=$? pid f
	if ((status != 0)); then
		echo "run.sh: failed (exit $status); logs in $tmp:" >&2
		for f in "$tmp"/haproxy.log "$tmp"/gateway.log "$tmp"/base.log "$tmp"/floor-*.log "$tmp"/nginx-*/error.log; do
			[[ -s $f ]] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
		done
	fi
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log() { echo "# $*" >&2; }

# free_port prints a TCP port on 127.0.0.1 that no socket uses and that this
# script has not handed out yet. It picks below the kernel's ephemeral port
# range, so that the outgoing connections of wrk and the proxies (and of
# whatever else runs here) cannot take it before the server binds it.
used_ports=" "
eph_low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
free_port() {
	local p i lo=10000 hi=$((eph_low - 1))
	((hi > lo)) || { lo=1024; hi=$((eph_low - 1)); }
	for i in $(seq 1 500); do
		p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1)))
		[[ $used_ports == *" $p "* ]] && continue
		if command -v ss >/dev/null 2>&1; then
			ss -Htan "( sport = :$p )" | grep -q . && continue
		elif (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			continue
		fi
		used_ports+="$p "
		echo "$p"
		return 0
	done
	echo "run.sh: no free port found" >&2
	return 1
}

# wait_http URL: wait up to 10s for URL to answer 200.
wait_http() {
	local i
	for i in $(seq 1 100); do
		if [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$1" || true) == 200 ]]; then
			return 0
		fi
		sleep 0.1
	done
	echo "run.sh: $1 did not answer 200 within 10s" >&2
	return 1
}

# ---------------------------------------------------------------- build
log "building tidegpu into $tmp"
if [[ -n ${TIDEGPU_BIN:-} ]]; then
	cp "$TIDEGPU_BIN" "$tmp/tidegpu"
else
	(cd "$repo" && go build -o "$tmp/tidegpu" ./cmd/tidegpu)
fi
"$tmp/tidegpu" gateway --help >/dev/null 2>&1 || { echo "run.sh: this tidegpu has no gateway subcommand" >&2; exit 1; }

# ---------------------------------------------------------------- backend
backend_port=$(free_port)
backend_ports=("$backend_port")
while ((${#backend_ports[@]} < BACKENDS)); do
	p=$(free_port)
	[[ " ${backend_ports[*]} " == *" $p "* ]] || backend_ports+=("$p")
done
body='{"model":"bench","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"ok"},"done":true}'
# nginx needs every temp path writable; keep them all in the temp dir.
nginx_common() { # $1: prefix dir
	cat <<EOF
pid $1/nginx.pid;
error_log $1/error.log warn;
daemon off;
EOF
}
nginx_http_common() { # $1: prefix dir
	cat <<EOF
    access_log off;
    client_body_temp_path $1/client_body;
    proxy_temp_path $1/proxy;
    fastcgi_temp_path $1/fastcgi;
    uwsgi_temp_path $1/uwsgi;
    scgi_temp_path $1/scgi;
    keepalive_timeout 65s;
    keepalive_requests 1000000;
EOF
}
{
	nginx_common "$tmp/nginx-backend"
	cat <<EOF
worker_processes 1;
events { worker_connections 4096; }
http {
$(nginx_http_common "$tmp/nginx-backend")
    server {
$(for p in "${backend_ports[@]}"; do echo "        listen 127.0.0.1:$p;"; done)
        location / {
            default_type application/json;
            return 200 '$body';
        }
    }
}
EOF
} >"$tmp/nginx-backend/nginx.conf"
nginx -e "$tmp/nginx-backend/error.log" -p "$tmp/nginx-backend" -c "$tmp/nginx-backend/nginx.conf" &
pids+=($!)
backend_pid=$!

# ---------------------------------------------------------------- HAProxy
haproxy_port=$(free_port)
cat >"$tmp/haproxy.cfg" <<EOF
global
    nbthread 2
    maxconn 4096

defaults
    mode http
    option http-keep-alive
    # reuse idle backend connections across client connections, as the
    # nginx upstream keepalive pool and the gateway's transport do
    http-reuse always
    timeout connect 5s
    timeout client 60s
    timeout server 60s

frontend fe
    bind 127.0.0.1:$haproxy_port
    default_backend be

backend be
    balance leastconn
$(i=0; for p in "${backend_ports[@]}"; do echo "    server backend$i 127.0.0.1:$p"; i=$((i + 1)); done)
EOF
haproxy -c -q -f "$tmp/haproxy.cfg"
haproxy -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
pids+=($!)
haproxy_pid=$!

# ---------------------------------------------------------------- nginx proxy
nginx_port=$(free_port)
{
	nginx_common "$tmp/nginx-proxy"
	cat <<EOF
worker_processes 2;
events { worker_connections 4096; }
http {
$(nginx_http_common "$tmp/nginx-proxy")
    upstream be {
$(for p in "${backend_ports[@]}"; do echo "        server 127.0.0.1:$p;"; done)
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$nginx_port;
        location / {
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
} >"$tmp/nginx-proxy/nginx.conf"
nginx -e "$tmp/nginx-proxy/error.log" -p "$tmp/nginx-proxy" -c "$tmp/nginx-proxy/nginx.conf" &
pids+=($!)
nginx_pid=$!

# ---------------------------------------------------------------- tidegpu gateway
# start_gateway BIN NAME: runs BIN's gateway before the backend on a free
# port (NAME_port), its log in $tmp/NAME.log, its pid in NAME_pid.
start_gateway() {
	local p a
	p=$(free_port) a=$(free_port)
	local bs=() b
	for b in "${backend_ports[@]}"; do bs+=(--backend "http://127.0.0.1:$b"); done
	"$1" gateway "${bs[@]}" \
		--addr "127.0.0.1:$p" --admin-addr "127.0.0.1:$a" \
		--log-level warn >"$tmp/$2.log" 2>&1 &
	pids+=($!)
	printf -v "$2_pid" '%s' $!
	printf -v "$2_port" '%s' "$p"
}
start_gateway "$tmp/tidegpu" gateway

# ---------------------------------------------------------------- the base build (TIDEGPU_BASE_BIN)
read -r -a peers <<<"$PAIR_PEERS"
if [[ -n ${TIDEGPU_BASE_BIN:-} ]]; then
	[[ -x $TIDEGPU_BASE_BIN ]] || { echo "run.sh: TIDEGPU_BASE_BIN=$TIDEGPU_BASE_BIN is not an executable file" >&2; exit 1; }
	start_gateway "$TIDEGPU_BASE_BIN" base
	peers+=(base)
fi

targets=(backend haproxy nginx gateway)
declare -A port=([backend]=$backend_port [haproxy]=$haproxy_port [nginx]=$nginx_port [gateway]=$gateway_port)
# The process whose CPU time is charged to each target: the proxy (the
# backend itself for the baseline). nginx's workers are children of the
# master started here; both are counted.
declare -A tpid=([backend]=$backend_pid [haproxy]=$haproxy_pid [nginx]=$nginx_pid [gateway]=$gateway_pid)
if [[ -n ${base_pid:-} ]]; then
	port[base]=$base_port tpid[base]=$base_pid
fi

# ---------------------------------------------------------------- engine floors (FLOORS)
declare -A label=()
if [[ -n $FLOORS ]]; then
	log "building enginefloor into $tmp"
	(cd "$repo" && go build -o "$tmp/enginefloor" ./bench/gateway/enginefloor)
	for e in $FLOORS; do
		p=$(free_port)
		"$tmp/enginefloor" -engine "$e" -listen "127.0.0.1:$p" -backend "127.0.0.1:$backend_port" >"$tmp/floor-$e.log" 2>&1 &
		pids+=($!)
		targets+=("floor-$e")
		port[floor-$e]=$p tpid[floor-$e]=$!
		label[floor-$e]="floor: enginefloor -engine $e (not the gateway)"
	done
fi
clk_tck=$(getconf CLK_TCK)

# cpu_ticks PID: "TOTAL SYSTEM", the user+system CPU time and the system
# time alone, in clock ticks, of PID and its children (all their threads),
# from one reading of each.
cpu_ticks() {
	local p f total=0 sys=0
	local -a fields
	for p in "$1" $(pgrep -P "$1" || true); do
		f=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		read -r -a fields <<<"${f##*) }" # fields[0] is field 3 (state)
		total=$((total + fields[11] + fields[12])) sys=$((sys + fields[12]))
	done
	echo "$total $sys"
}
label+=(
	[backend]="baseline: wrk → backend (no proxy)"
	[haproxy]="HAProxy $(haproxy -v | sed -n '1s/^HAProxy version \([^ ]*\).*/\1/p')"
	[nginx]="nginx $(nginx -v 2>&1 | sed -n 's|^nginx version: nginx/||p') (proxy_pass)"
	[gateway]="tidegpu gateway (this tree)"
	[base]="tidegpu gateway (TIDEGPU_BASE_BIN)"
)

for t in "${targets[@]}" ${base_pid:+base}; do
	wait_http "http://127.0.0.1:${port[$t]}/api/tags"
done
got=$(curl -s --max-time 2 "http://127.0.0.1:$gateway_port/api/tags")
[[ $got == "$body" ]] || { echo "run.sh: gateway answered $got, want the backend's body" >&2; exit 1; }
for t in "${targets[@]}"; do
	got=$(curl -s --max-time 2 -X POST -H 'Content-Type: application/json' --data '{"x":1}' "http://127.0.0.1:${port[$t]}/api/chat")
	[[ $got == "$body" ]] || { echo "run.sh: POST through $t answered $got, want the backend's body" >&2; exit 1; }
done

prompt="Write one short sentence about the sea."
if ((PROMPT_BYTES > 0)); then
	# A prompt of PROMPT_BYTES bytes: the words repeated, cut to length.
	prompt=""
	while ((${#prompt} < PROMPT_BYTES)); do
		prompt+="The sea is calm tonight, the tide is full, the moon lies fair upon the straits. "
	done
	prompt=${prompt:0:PROMPT_BYTES}
fi
# With PROMPT_DISTINCT, the prompt's first 16 bytes are replaced by the
# wrk thread's number and the request's, so that the body's length stays.
((PROMPT_DISTINCT == 0 || ${#prompt} >= 16)) || prompt=$(printf '%-16s' "$prompt")
post_body='{"model":"qwen2:0.5b","messages":[{"role":"user","content":"'"$prompt"'"}],"stream":false}'
if ((PROMPT_DISTINCT)); then
	cat >"$tmp/post.lua" <<EOF
wrk.method = "POST"
wrk.path = "/api/chat"
wrk.headers["Content-Type"] = "application/json"
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local n = 0
local tail = '${prompt:16}'
request = function()
  n = n + 1
  return wrk.format(nil, nil, nil, '{"model":"qwen2:0.5b","messages":[{"role":"user","content":"' .. string.format("%6d%09d ", tid, n % 1000000000) .. tail .. '"}],"stream":false}')
end
EOF
else
	cat >"$tmp/post.lua" <<EOF
wrk.method = "POST"
wrk.path = "/api/chat"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '$post_body'
EOF
fi
{
	cat "$tmp/post.lua"
	echo "function delay() return $PACE_MS end"
} >"$tmp/paced.lua"

# wrk_run TARGET MODE DURATION OUTFILE
wrk_run() {
	local url="http://127.0.0.1:${port[$1]}/api/tags" script=()
	case $2 in
	post | paced)
		url="http://127.0.0.1:${port[$1]}/api/chat"
		script=(-s "$tmp/$2.lua")
		;;
	esac
	local c0 c1 s0 s1 b0 b1 m0 m1 TIMEFORMAT='%U %S'
	read -r c0 s0 <<<"$(cpu_ticks "${tpid[$1]}")"
	read -r b0 _ <<<"$(cpu_ticks "$backend_pid")"
	m0=$(machine_ticks)
	{ time wrk -t"$THREADS" -c"$CONNECTIONS" -d"$3" --latency "${script[@]}" "$url" >"$4" 2>&1; } 2>"$4.time"
	read -r c1 s1 <<<"$(cpu_ticks "${tpid[$1]}")"
	read -r b1 _ <<<"$(cpu_ticks "$backend_pid")"
	m1=$(machine_ticks)
	echo "cpu_ticks: $((c1 - c0)) (CLK_TCK $clk_tck, pid ${tpid[$1]} and children: $1)" >>"$4"
	echo "sys_ticks: $((s1 - s0))" >>"$4"
	# The baseline's backend is its target: its CPU is cpu_ticks already.
	[[ $1 == backend ]] && b1=$b0
	echo "backend_ticks: $((b1 - b0))" >>"$4"
	echo "machine_ticks: $((m1 - m0))" >>"$4"
	echo "wrk_seconds: $(awk '{print $1 + $2}' "$4.time")" >>"$4"
}

# machine_ticks: the busy CPU time of the whole machine so far, in clock
# ticks (/proc/stat: user, nice, system, irq, softirq, steal).
machine_ticks() {
	awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat
}

# to_ms VALUE_WITH_UNIT: wrk latency (e.g. 512.00us, 1.23ms, 1.01s) in ms.
to_ms() {
	awk -v v="$1" 'BEGIN {
		n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
		if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
		printf "%.3f", n }'
}

# parse FILE: prints "reqs p50ms p99ms errors cpu_us_per_request
# neighbours_us_per_request machine_us_per_request sys_us_per_request"
# from one wrk output (with the lines wrk_run appends; the last three are
# 0 where it did not count them, as in the paired mode). The neighbours
# are wrk and the backend (for the baseline, wrk alone); sys is the part
# of the target's CPU per request spent in the kernel.
parse() {
	local rps p50 p99 errs cpu more
	rps=$(awk '/^Requests\/sec:/ {print $2}' "$1")
	cpu=$(awk -v hz="$clk_tck" '/ requests in / {n = $1} /^cpu_ticks:/ {t = $2} END {if (n > 0) printf "%.1f", t * 1e6 / hz / n; else print 0}' "$1")
	more=$(awk -v hz="$clk_tck" '
		/ requests in / {n = $1} /^backend_ticks:/ {b = $2} /^machine_ticks:/ {m = $2} /^wrk_seconds:/ {w = $2} /^sys_ticks:/ {s = $2}
		END {if (n > 0) printf "%.1f %.1f %.1f", (w * 1e6 + b * 1e6 / hz) / n, m * 1e6 / hz / n, s * 1e6 / hz / n; else print "0 0 0"}' "$1")
	p50=$(awk '$1 == "50%" {print $2; exit}' "$1")
	p99=$(awk '$1 == "99%" {print $2; exit}' "$1")
	errs=$(awk '/Non-2xx or 3xx responses:/ {n += $NF} /Socket errors:/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {print n + 0}' "$1")
	if [[ -z $rps || -z $p50 || -z $p99 ]]; then
		echo "run.sh: cannot parse $1:" >&2
		cat "$1" >&2
		return 1
	fi
	echo "$rps $(to_ms "$p50") $(to_ms "$p99") $errs $cpu $more"
}

median() { # numbers as arguments
	printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}

# wrk_pair PEER DURATION OUTGW OUTPEER: the gateway and PEER under POSTs
# (GETs when pair_get is 1) at the same time, each by a wrk with half the
# threads and connections; the CPU of each over the same span is appended
# to its output.
pair_get=0
wrk_pair() {
	local t c g0 g1 p0 p1 wg wp path=/api/chat script=(-s "$tmp/post.lua")
	if ((pair_get)); then
		path=/api/tags script=()
	fi
	t=$(((THREADS + 1) / 2)) c=$(((CONNECTIONS + 1) / 2))
	read -r g0 _ <<<"$(cpu_ticks "$gateway_pid")"
	read -r p0 _ <<<"$(cpu_ticks "${tpid[$1]}")"
	wrk -t"$t" -c"$c" -d"$2" --latency "${script[@]}" "http://127.0.0.1:$gateway_port$path" >"$3" 2>&1 &
	wg=$!
	wrk -t"$t" -c"$c" -d"$2" --latency "${script[@]}" "http://127.0.0.1:${port[$1]}$path" >"$4" 2>&1 &
	wp=$!
	wait "$wg" "$wp"
	read -r g1 _ <<<"$(cpu_ticks "$gateway_pid")"
	read -r p1 _ <<<"$(cpu_ticks "${tpid[$1]}")"
	echo "cpu_ticks: $((g1 - g0)) (CLK_TCK $clk_tck, pid $gateway_pid and children: gateway)" >>"$3"
	echo "cpu_ticks: $((p1 - p0)) (CLK_TCK $clk_tck, pid ${tpid[$1]} and children: $1)" >>"$4"
}

# paired_mode: MODES=paired, or paired-get with pair_get set (see the top
# of this file). It sets paired_failed when the gateway is over the limit.
paired_failed=0
paired_mode() {
	local peer run f g p rg cg rp cp ratios cg_all cp_all rr_all e
	echo
	local what="POST /api/chat with a ${#post_body}-byte JSON body" tag=paired
	if ((pair_get)); then
		what="GET /api/tags (no request body)" tag=paired-get
	fi
	echo "### $what, the gateway and a peer loaded at the same time (wrk -t$(((THREADS + 1) / 2)) -c$(((CONNECTIONS + 1) / 2)) on each)"
	echo
	echo "| peer | gateway CPU per request | peer CPU per request | gateway / peer, median (worst run) | gateway's req/s / peer's, median |"
	echo "|---|---:|---:|---:|---:|"
	for peer in "${peers[@]}"; do
		log "mode $tag: warming up with $peer"
		wrk_pair "$peer" "$WARMUP" "$results/$tag-$peer-gw-warmup.txt" "$results/$tag-$peer-warmup.txt"
		ratios="" cg_all="" cp_all="" rr_all="" e=0
		for run in $(seq 1 "$RUNS"); do
			log "mode $tag: run $run/$RUNS: gateway with $peer"
			g="$results/$tag-$peer-gw-run$run.txt" p="$results/$tag-$peer-run$run.txt"
			wrk_pair "$peer" "$DURATION" "$g" "$p"
			read -r rg _ _ f cg _ <<<"$(parse "$g")"
			e=$((e + f))
			read -r rp _ _ f cp _ <<<"$(parse "$p")"
			e=$((e + f))
			cg_all+="$cg " cp_all+="$cp "
			ratios+="$(awk -v a="$cg" -v b="$cp" 'BEGIN {printf "%.3f", a / b}') "
			rr_all+="$(awk -v a="$rg" -v b="$rp" 'BEGIN {printf "%.3f", a / b}') "
		done
		# shellcheck disable=SC2086 # word splitting of the lists is intended
		awk -v l="${label[$peer]}" -v g="$(median $cg_all)" -v p="$(median $cp_all)" -v r="$(median $ratios)" \
			-v w="$(printf '%s\n' $ratios | sort -g | tail -1)" -v q="$(median $rr_all)" \
			'BEGIN { printf "| %s | %.1f µs | %.1f µs | %.2fx (%.2fx) | %.2f |\n", l, g, p, r, w, q }'
		echo "  per-run gateway / $peer CPU per request: $ratios"
		# shellcheck disable=SC2086
		if [[ $peer == haproxy ]] && awk -v r="$(median $ratios)" 'BEGIN {exit !(r > 1.5)}'; then
			echo "FAIL: $tag: the gateway's CPU per request is $(median $ratios)x HAProxy's, over the limit of 1.5x (issue 19)"
			paired_failed=1
		fi
		((e == 0)) || echo "WARNING: $e non-2xx responses or socket errors in the runs with $peer (see $results/$tag-$peer-*)"
	done
}

cat <<EOF

Proxy overhead benchmark — $(date -u +%Y-%m-%dT%H:%M:%SZ)
  machine: $(nproc) CPU(s), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), Linux $(uname -r)
  wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency, $RUNS runs per target, interleaved (every other run in reverse order); medians reported
  backend: nginx, 1 worker, fixed ${#body}-byte JSON body (return 200), keep-alive; ${BACKENDS} backend(s) (ports of that worker) in every proxy's pool
  NOTE: wrk, the proxy under test and the backend all share these $(nproc) CPU(s), so
  each number measures the whole path competing for the same cores, not the
  proxy alone; compare targets with each other, not with other machines.
  load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (anything above ~0.5 means other work competes for the CPUs)
  raw wrk output: $results
EOF

for mode in $MODES; do
	case $mode in
	get) what="GET /api/tags (no request body)" ;;
	post) what="POST /api/chat with a ${#post_body}-byte JSON body" ;;
	paced) what="POST /api/chat with a ${#post_body}-byte JSON body, paced: $PACE_MS ms between a connection's answer and its next request" ;;
	paired | paired-get)
		pair_get=0
		[[ $mode == paired-get ]] && pair_get=1
		paired_mode
		continue
		;;
	*) echo "run.sh: unknown mode $mode in MODES (want get, post, paced, paired, paired-get)" >&2; exit 1 ;;
	esac
	log "mode $mode: warming up"
	for t in "${targets[@]}"; do
		wrk_run "$t" "$mode" "$WARMUP" "$results/$mode-$t-warmup.txt"
	done
	declare -A rps=() p50=() p99=() errs=() cpu=() nbr=() mach=() sys=()
	for run in $(seq 1 "$RUNS"); do
		order=("${targets[@]}")
		if ((run % 2 == 0)); then
			order=()
			for ((i = ${#targets[@]} - 1; i >= 0; i--)); do order+=("${targets[$i]}"); done
		fi
		for t in "${order[@]}"; do
			log "mode $mode: run $run/$RUNS: $t"
			f="$results/$mode-$t-run$run.txt"
			wrk_run "$t" "$mode" "$DURATION" "$f"
			out=$(parse "$f")
			read -r r a b e c nb mc sy <<<"$out"
			rps[$t]+="$r "
			sys[$t]+="$sy "
			p50[$t]+="$a "
			p99[$t]+="$b "
			cpu[$t]+="$c "
			nbr[$t]+="$nb "
			mach[$t]+="$mc "
			errs[$t]=$((${errs[$t]:-0} + e))
		done
	done

	# shellcheck disable=SC2086 # word splitting of the lists is intended
	ref=$(median ${rps[haproxy]})
	# shellcheck disable=SC2086
	cref=$(median ${cpu[haproxy]})
	echo
	echo "### $what; response: ${#body}-byte JSON"
	echo
	echo "| target | req/s | p50 | p99 | req/s relative to HAProxy | CPU per request | of which in the kernel | CPU per request relative to HAProxy | wrk's and the backend's CPU per request | the whole machine's CPU per request |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for t in "${targets[@]}"; do
		# shellcheck disable=SC2086
		r=$(median ${rps[$t]})
		# shellcheck disable=SC2086
		a=$(median ${p50[$t]})
		# shellcheck disable=SC2086
		b=$(median ${p99[$t]})
		# shellcheck disable=SC2086
		c=$(median ${cpu[$t]})
		# shellcheck disable=SC2086
		nb=$(median ${nbr[$t]})
		# shellcheck disable=SC2086
		mc=$(median ${mach[$t]})
		# shellcheck disable=SC2086
		sy=$(median ${sys[$t]})
		awk -v l="${label[$t]}" -v r="$r" -v a="$a" -v b="$b" -v ref="$ref" -v c="$c" -v cref="$cref" -v nb="$nb" -v mc="$mc" -v sy="$sy" \
			-v who="$([[ $t == backend ]] && echo " (backend)")" -v nwho="$([[ $t == backend ]] && echo " (wrk)")" \
			'BEGIN { printf "| %s | %.0f | %.2f ms | %.2f ms | %.0f%% | %.1f µs%s | %.1f µs | %.2fx | %.1f µs%s | %.1f µs |\n", l, r, a, b, 100 * r / ref, c, who, sy, c / cref, nb, nwho, mc }'
	done
	echo
	echo "per-run req/s:"
	for t in "${targets[@]}"; do
		echo "  $t: ${rps[$t]}"
	done
	echo "per-run CPU per request (µs):"
	for t in "${targets[@]}"; do
		echo "  $t: ${cpu[$t]}"
	done
	# The host's speed drifts between runs, so a target's req/s is read
	# against HAProxy's in the same run too (they ran seconds apart).
	echo "req/s relative to HAProxy's in the same run: median (worst); per run"
	for t in "${targets[@]}"; do
		[[ $t == haproxy ]] && continue
		# shellcheck disable=SC2086
		same=$(paste -d' ' <(printf '%s\n' ${rps[$t]}) <(printf '%s\n' ${rps[haproxy]}) | awk '{printf "%.2f\n", $1 / $2}')
		# shellcheck disable=SC2086
		echo "  $t: $(median $same) ($(printf '%s\n' $same | sort -g | head -1)); $(echo $same)"
	done
	echo "CPU per request: user+system CPU time of the proxy process (nginx: master and"
	echo "workers) over the run divided by the requests wrk completed; for the baseline,"
	echo "the backend's own. Less sensitive than req/s to what else runs on the machine."
	echo "Of which in the kernel: its system time alone (system calls, the wake-ups and"
	echo "switches they cause); the rest is the proxy's own code in user space."
	echo "wrk's and the backend's CPU per request: what the proxy makes the processes"
	echo "around it spend (wrk's from bash's time, the backend's from /proc); a proxy that"
	echo "answers in bursts wakes them less often. The whole machine's: its busy time"
	echo "(/proc/stat) over the run per request, everything on the path and anything else."
	for t in "${targets[@]}"; do
		if ((${errs[$t]} > 0)); then
			echo "WARNING: $t: ${errs[$t]} non-2xx responses or socket errors over its runs (see $results/$mode-$t-run*.txt)"
		fi
	done
	unset rps p50 p99 errs cpu nbr mach sys
done

echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "raw wrk output: $results"
((paired_failed == 0)) || exit 1
