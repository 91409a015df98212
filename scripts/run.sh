#!/usr/bin/env bash
# Quick start: 4 simulated SGLang workers on 127.0.0.1:30001-30004 and Caddy
# with Caddyfile.example in front of them. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."

./bin/sglsim -n 4 -host 127.0.0.1 -base-port 30001 \
	-cache-tokens 4096 -prefill-per-token 50us -decode-per-token 2ms &
sim=$!
trap 'kill $sim 2>/dev/null || true' EXIT INT TERM

cat <<'MSG'

sglroute is starting: 4 simulated SGLang workers behind Caddy.
Try (the second request for the same prompt lands on the same worker and
reports cached tokens):

  curl -s http://localhost:8080/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"sim-model","messages":[{"role":"system","content":"You are a helpful assistant who answers briefly."},{"role":"user","content":"Hello!"}]}' -i

  curl -sk https://localhost:8443/generate -d '{"text":"Once upon a time","sampling_params":{"max_new_tokens":8},"stream":true}'

  curl -s http://localhost:8080/v1/completions -d '{"prompt":"broken'      # -> 400 JSON error

Routing decisions are in the X-Sglroute-Worker response header.
Ctrl-C to stop.

MSG
./bin/caddy run --config Caddyfile.example --adapter caddyfile
