#!/usr/bin/env bash
# Runs bench/gateway/run.sh with enginefloor (ENGINE=nethttp|fasthttp|h1|h1server|h1pass|loop|coro|corolocked|raw,
# default fasthttp) in the gateway's place: the "tidegpu gateway" row of its
# tables is then the engine's floor as a plain reverse proxy.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/enginefloor.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$repo" && go build -o "$tmp/enginefloor" ./bench/gateway/enginefloor)
# A stand-in for "tidegpu gateway": run.sh calls it with --help, then with
# --backend URL --addr HOST:PORT and flags enginefloor does not need.
cat >"$tmp/tidegpu" <<WRAP
#!/usr/bin/env bash
[[ \${2:-} == --help ]] && exit 0
shift
while ((\$#)); do case \$1 in --backend) be=\${2#http://}; shift 2;; --addr) ad=\$2; shift 2;; *) shift;; esac; done
exec "$tmp/enginefloor" -engine "${ENGINE:-fasthttp}" -listen "\$ad" -backend "\$be"
WRAP
chmod +x "$tmp/tidegpu"
TIDEGPU_BIN="$tmp/tidegpu" bash "$repo/bench/gateway/run.sh"
