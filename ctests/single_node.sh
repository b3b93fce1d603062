# Sourced by the shell tests: start_single_node CONTROLLER starts a one-node xce-controller on
# free loopback ports (sets $port, $free — a port nothing listens on — and $node_dir) and stops
# it, removing its data, when the calling script exits.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
start_single_node() {
  local controller=$1 raft
  node_dir=$(mktemp -d); port=$(free_port); raft=$(free_port); free=$(free_port)
  "$controller" run --id 1 --cluster "1=127.0.0.1:$port/127.0.0.1:$raft" --data "$node_dir" \
    >"$node_dir/log" 2>&1 &
  node_pid=$!
  trap 'kill "$node_pid" 2>/dev/null; wait "$node_pid" 2>/dev/null; rm -rf "$node_dir"' EXIT
  for _ in $(seq 100); do   # bounded: 10 s
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    kill -0 "$node_pid" 2>/dev/null || { echo "controller exited"; cat "$node_dir/log"; return 1; }
    sleep 0.1
  done
  echo "controller did not listen on $port"; return 1
}
