#!/usr/bin/env bash
# Runs the chart's pods as plain processes, without Kubernetes: renders
# deploy/k8s/sluice with the default values, then starts every pod's sluiced
# with exactly the rendered args, each in a network and UTS namespace of its
# own (host name = pod name, as a kubelet sets it; /etc/hosts maps the pods'
# DNS names to their addresses, as the headless Services would), all inside
# a private network and mount namespace of this script, so nothing reaches
# the host's network. Then: every pod SERVING, the etcd quorum of 3,
# a topic with replication factor 3 produced to and read back by a group,
# and a storage node's SIGTERM stop timed. Needs root, iproute2, python3.
#   make helm-netns-check   (or: deploy/k8s/netns-check.sh HELM SLUICED SLUICE)
# What it cannot show: scheduling, volumes, Services, probes, DNS, upgrades.
set -euo pipefail
HELM=$(realpath "${1:?helm}") SLUICED=$(realpath "${2:?sluiced}") SLUICE=$(realpath "${3:?sluice}")
CHART=$(cd "$(dirname "$0")/sluice" && pwd)
if [ "${NETNS_CHECK_INNER:-}" != 1 ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$HELM" template rel "$CHART" --namespace streams --kube-version 1.28.0 > "$work/all.yaml"
  # One line per pod: its name, then its args with $(POD_NAME) and
  # $(POD_INDEX) filled in as the kubelet would (Deployment pods get a
  # made-up suffix).
  python3 - "$work" <<'PY'
import re, sys
work = sys.argv[1]
out = []
for d in open(work + '/all.yaml').read().split('\n---\n'):
    m = re.search(r'^kind: (StatefulSet|Deployment)$', d, re.M)
    if not m:
        continue
    name = re.search(r'^  name: (\S+)$', d, re.M).group(1)
    reps = int(re.search(r'^  replicas: (\d+)$', d, re.M).group(1))
    args = re.findall(r'^            - (--\S+)$', d, re.M)
    for i in range(reps):
        pod = f'{name}-{i}' if m.group(1) == 'StatefulSet' else f'{name}-5f7c9-x{i}'
        out.append(' '.join([pod] + [a.replace('$(POD_NAME)', pod).replace('$(POD_INDEX)', str(i)) for a in args]))
open(work + '/pods', 'w').write('\n'.join(out) + '\n')
PY
  NETNS_CHECK_INNER=1 WORK=$work timeout 300 unshare -n -m -u --propagation private "$(realpath "$0")" "$HELM" "$SLUICED" "$SLUICE"
  exit
fi

cd "$WORK"
pids=()
trap 'for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done' EXIT
ip link set lo up
mkdir -p /run/netns && mount -t tmpfs tmpfs /run/netns
ip link add br0 type bridge && ip addr add 10.99.0.1/24 dev br0 && ip link set br0 up
k=0
echo "127.0.0.1 localhost" > hosts
while read -r pod _; do
  echo "10.99.0.$((10 + k)) $pod.${pod%-*}.streams.svc.cluster.local $pod" >> hosts
  k=$((k + 1))
done < pods
mount --bind "$WORK/hosts" /etc/hosts
k=0
while read -r pod args; do
  ip netns add "p$k"
  ip link add "v$k" type veth peer name eth0 netns "p$k"
  ip link set "v$k" master br0 up
  ip -n "p$k" addr add "10.99.0.$((10 + k))/24" dev eth0
  ip -n "p$k" link set eth0 up
  ip -n "p$k" link set lo up
  mkdir -p "data/$pod"
  # The image's entrypoint flags, then the pod's args.
  ip netns exec "p$k" unshare -u sh -c "hostname $pod; exec $SLUICED --data-dir=$WORK/data/$pod --http-listen=0.0.0.0:9091 $args" > "log.$pod" 2>&1 &
  pids+=($!)
  echo "$!" > "pid.$pod"
  k=$((k + 1))
done < pods

start=$(date +%s)
for _ in $(seq 1 90); do
  bad=0
  for ((i = 0; i < k; i++)); do "$SLUICE" health --timeout=2s "10.99.0.$((10 + i)):9090" >/dev/null 2>&1 || bad=$((bad + 1)); done
  [ "$bad" -eq 0 ] && break
  sleep 2
done
if [ "$bad" -ne 0 ]; then
  echo "FAIL: $bad of $k pods not SERVING after $(( $(date +%s) - start )) s"; tail -n 5 log.*; exit 1
fi
echo "all $k pods SERVING $(( $(date +%s) - start )) s after start"
export SLUICE_BOOTSTRAP=rel-sluice-controller-0.rel-sluice-controller.streams.svc.cluster.local:9090
"$SLUICE" cluster describe
"$SLUICE" cluster describe | grep -q 'majority (3 of 3' || { echo "FAIL: no quorum of 3"; exit 1; }
"$SLUICE" topic create orders -p 3 -r 3
seq 1 1000 | "$SLUICE" produce orders --acks all
got=$("$SLUICE" consume orders --group g1 --from-beginning --max-messages 1000 | wc -l)
"$SLUICE" topic describe orders
[ "$got" -eq 1000 ] || { echo "FAIL: the group read $got of 1000 records"; exit 1; }
p=$(cat pid.rel-sluice-storage-1)
t0=$(date +%s%N)
kill -TERM "$p"
while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
echo "storage-1 stopped $(( ($(date +%s%N) - t0) / 1000000 )) ms after SIGTERM"
echo "PASS: the rendered args of $k pods form a cluster"
