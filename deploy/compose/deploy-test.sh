#!/usr/bin/env bash
# The compose cluster end to end, from no image, with container faults under
# load. Builds the image, starts the cluster, does a produce/consume round
# trip with replication factor 3 and a consumer group through the published
# ports (the sluice CLI on this host). Then, while a producer with acks=all
# keeps writing (small `sluice produce` runs, each one's records counted as
# acknowledged only when it exits 0) and a consumer group keeps reading, one
# fault after another, each healed before the next:
#   - docker kill of a storage node's container, then docker start;
#   - docker kill of the active controller's container, then docker start;
#   - docker kill of the container coordinating the group, then docker start;
#   - docker pause of a storage node for longer than the session timeout
#     (it comes back fenced, as a zombie), then docker unpause;
#   - docker network disconnect of a storage node from the compose network,
#     then docker network connect.
# At the end every acknowledged record must be in the topic exactly as
# acknowledged and exactly once, the group must have read every one
# (duplicates are counted, not failed), and every container must be healthy
# with the cluster seeing its three controllers and every node alive.
# Prints each phase's duration and the longest gap between acknowledged
# produce runs. Bounded in time; removes its containers, volumes, network
# and image on any exit. Run it with `make deploy-test`.
#
# Environment: SLUICE (the host's sluice CLI, default bin/image/sluice, which
# make image builds), DEPLOY_TEST_DEADLINE (seconds, default 1200).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
project=sluice-deploy-test
image=sluice:deploy-test
ports=27 # published on 127.0.0.1:27091-27093, 27101-27103, 27111-27113
sluice=${SLUICE:-$root/bin/image/sluice}
deadline=$(( $(date +%s) + ${DEPLOY_TEST_DEADLINE:-1200} ))
work=$(mktemp -d)
start=$(date +%s)
make_args=(IMAGE="$image" COMPOSE_PROJECT="$project")
compose=(docker-compose -p "$project" -f "$root/deploy/compose/docker-compose.yml")
network=${project}_sluice
export SLUICE_IMAGE=$image SLUICE_PORT_PREFIX=$ports
# On a loaded machine the Docker daemon takes longer than docker-compose's
# 60 s default to create a dozen containers.
export COMPOSE_HTTP_TIMEOUT=${COMPOSE_HTTP_TIMEOUT:-300}
export SLUICE_BOOTSTRAP=127.0.0.1:${ports}091,127.0.0.1:${ports}092,127.0.0.1:${ports}093 SLUICE_CONFIG=
# How long a fault lasts before it is healed: the pause is longer than the
# controllers' session timeout (9 s), so the node is fenced while paused.
fault_secs=15 pause_secs=20

step() { echo "=== $(( $(date +%s) - start ))s: $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
left() { local l=$(( deadline - $(date +%s) )); (( l > 0 )) || fail "deadline passed"; echo "$l"; }
now() { date +%s.%N; }

# phase NAME: a phase starts now (its duration and longest stall are
# reported at the end).
phase() { echo "$(now) $1" >>"$work/phases"; step "phase $1"; }

loaders=()
cleanup() {
	rc=$?
	touch "$work/stop"
	for pid in "${loaders[@]}"; do
		pkill -P "$pid" 2>/dev/null || true
		kill "$pid" 2>/dev/null || true
	done
	if (( rc != 0 )); then
		echo "--- logs of the containers (last 20 lines each)"
		"${compose[@]}" logs --tail 20 2>&1 | tail -300 || true
		tail -5 "$work/producer.err" "$work/consumer.err" 2>/dev/null || true
	fi
	step "cleaning up"
	docker ps -q --filter "label=com.docker.compose.project=$project" --filter status=paused |
		xargs -r docker unpause >/dev/null 2>&1 || true
	"${compose[@]}" down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1 || true
	docker image rm -f "$image" >/dev/null 2>&1 || true
	rm -rf "$work"
	echo "deploy-test: $([[ $rc == 0 ]] && echo PASS || echo FAIL) in $(( $(date +%s) - start ))s"
}
trap cleanup EXIT
# Killed or interrupted is a failure, not a pass.
trap 'exit 143' TERM
trap 'exit 130' INT

# produce FILE: produce the lines of FILE with acks=all; true when every
# record was acknowledged.
produce() { timeout "$(left)" "$sluice" produce dt --acks all --request-timeout 60s <"$1" >/dev/null; }

# consume N OUT [ARGS...]: read up to N records from the beginning.
consume() {
	local n=$1 out=$2
	shift 2
	timeout "$(left)" "$sluice" consume dt --from-beginning --max-messages "$n" --timeout 120s "$@" >"$out"
}

# missing ACKED GOT: lines of ACKED that are not in GOT.
missing() { comm -23 <(sort -u "$1") <(sort -u "$2"); }

# container SERVICE: the id of SERVICE's (first) container.
container() { "${compose[@]}" ps -q "$1" | head -1; }
health() { docker inspect --format '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}' "$1"; }
wait_healthy() {
	until [[ $(health "$1") == "running healthy" ]]; do
		left >/dev/null
		sleep 1
	done
}

# wait_isr: every partition of dt has its 3 replicas in sync.
wait_isr() {
	until "$sluice" topic describe dt 2>/dev/null | awk 'NR > 2 && $5 !~ /^[0-9]+,[0-9]+,[0-9]+$/ { bad = 1 } END { exit bad }'; do
		left >/dev/null
		sleep 1
	done
}

# cluster_whole: an active controller, the quorum with all three members
# reachable, and every registered node alive.
cluster_whole() {
	"$sluice" cluster describe -o json 2>/dev/null | jq -e '
		(.controllerId // -1) >= 0 and .quorum.hasMajority == true and (.quorum.reachable | length) == 3
		and ([.brokers[] | select(.state != "BROKER_STATE_ALIVE")] | length) == 0' >/dev/null
}
wait_cluster_whole() {
	until cluster_whole; do
		left >/dev/null
		sleep 1
	done
}

# active_controller: the node id of the active controller, -1 for none.
active_controller() { "$sluice" cluster describe -o json 2>/dev/null | jq -r '.controllerId // -1' || echo -1; }

# group_coordinator: the address of the node coordinating dt-group.
group_coordinator() { "$sluice" group describe dt-group -o json 2>/dev/null | jq -r '.coordinator.address // ""' || true; }

# ip CONTAINER: its address on the compose network.
ip() { docker inspect --format "{{(index .NetworkSettings.Networks \"$network\").IPAddress}}" "$1" 2>/dev/null || true; }

# producer: produces chunks of 50 records with acks=all until told to stop;
# a chunk's records count as acknowledged only when produce exits 0.
# Logs when each run ended and whether it was acknowledged.
producer() {
	local i=0
	while [[ ! -e $work/stop && ! -e $work/stop-producer ]]; do
		seq -f "load-$i-%g" 1 50 >"$work/chunk"
		if timeout 120 "$sluice" produce dt --acks all --request-timeout 60s <"$work/chunk" >/dev/null 2>>"$work/producer.err"; then
			cat "$work/chunk" >>"$work/acked"
			echo "$(now) ok" >>"$work/runs"
		else
			echo "$(now) failed" >>"$work/runs"
		fi
		i=$(( i + 1 ))
	done
}

# group_consumer: a member of dt-group that prints what it reads, started
# again whenever it exits, until told to stop.
group_consumer() {
	while [[ ! -e $work/stop ]]; do
		"$sluice" consume dt --group dt-group >>"$work/consumed" 2>>"$work/consumer.err" ||
			echo "$(now) consumer exited: $?" >>"$work/consumer.err"
		[[ -e $work/stop ]] || sleep 1
	done
}

step "removing $image and any earlier $project cluster"
"${compose[@]}" down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1 || true
docker image rm -f "$image" >/dev/null 2>&1 || true

phase image
timeout "$(left)" make --no-print-directory image "${make_args[@]}" >"$work/image.log" 2>&1 || { tail -20 "$work/image.log"; fail "make image"; }
[[ -x $sluice ]] || fail "no sluice CLI at $sluice"
phase compose-up
timeout "$(left)" make --no-print-directory compose-up "${make_args[@]}" >"$work/up.log" 2>&1 || { tail -20 "$work/up.log"; fail "make compose-up"; }
tail -1 "$work/up.log"

phase round-trip
"$sluice" topic create dt -p 6 -r 3 >/dev/null
seq -f 'before-%g' 1 3000 >"$work/before"
produce "$work/before" || fail "producing the first 3000 records"
consume 3000 "$work/got1"
[[ -z $(missing "$work/before" "$work/got1") ]] || fail "round trip: $(missing "$work/before" "$work/got1" | wc -l) records missing"
consume 3000 "$work/group1" --group dt-group
[[ -z $(missing "$work/before" "$work/group1") ]] || fail "group: $(missing "$work/before" "$work/group1" | wc -l) records missing"
step "round trip: 3000 records produced and read back, and by group dt-group"

phase load
: >"$work/acked"
: >"$work/consumed"
producer &
loaders+=($!)
group_consumer &
loaders+=($!)
sleep 10
[[ -s $work/acked ]] || fail "nothing acknowledged in 10 s of load"

phase kill-storage
victim=$(container storage-2)
docker kill "$victim" >/dev/null
sleep "$fault_secs"
docker start "$victim" >/dev/null
wait_healthy "$victim"
step "storage-2 healthy; waiting for every ISR to be full"
wait_isr

phase kill-controller
id=$(active_controller)
(( id >= 1 && id <= 3 )) || fail "no active controller among 1-3 (got $id)"
victim=$(container "controller-$id")
step "active controller is node $id: docker kill controller-$id"
t=$(date +%s)
docker kill "$victim" >/dev/null
until next=$(active_controller) && (( next >= 0 && next != id )); do
	left >/dev/null
	sleep 0.5
done
step "node $next active after $(( $(date +%s) - t ))s"
sleep "$fault_secs"
docker start "$victim" >/dev/null
wait_healthy "$victim"
wait_cluster_whole
step "controller-$id healthy, quorum whole"

phase kill-coordinator
addr=$(group_coordinator)
[[ -n $addr ]] || fail "no coordinator for dt-group"
victim=
for c in $("${compose[@]}" ps -q group-coordinator); do
	[[ $(ip "$c"):9090 == "$addr" ]] && victim=$c
done
[[ -n $victim ]] || fail "no group-coordinator container at $addr"
step "dt-group's coordinator is at $addr: docker kill $(docker inspect --format '{{.Name}}' "$victim")"
docker kill "$victim" >/dev/null
sleep "$fault_secs"
step "coordinator of dt-group now: $(group_coordinator)"
docker start "$victim" >/dev/null
wait_healthy "$victim"
wait_cluster_whole

phase pause-storage
victim=$(container storage-3)
docker pause "$victim" >/dev/null
sleep "$pause_secs"
docker unpause "$victim" >/dev/null
wait_healthy "$victim"
wait_cluster_whole
wait_isr

phase disconnect-storage
victim=$(container storage-1)
before_ip=$(ip "$victim")
aliases=$(docker inspect --format "{{range (index .NetworkSettings.Networks \"$network\").Aliases}}--alias {{.}} {{end}}" "$victim")
docker network disconnect "$network" "$victim"
sleep "$fault_secs"
# shellcheck disable=SC2086 # one word per flag and alias
docker network connect $aliases --ip "$before_ip" "$network" "$victim" 2>"$work/connect.err" ||
	docker network connect $aliases "$network" "$victim"
[[ $(ip "$victim") == "$before_ip" ]] || step "storage-1 came back as $(ip "$victim"), was $before_ip"
wait_healthy "$victim"
wait_cluster_whole
wait_isr

phase drain
touch "$work/stop-producer"
while pgrep -P "${loaders[0]}" >/dev/null; do left >/dev/null; sleep 0.5; done
acked=$(wc -l <"$work/acked")
until [[ -z $(missing "$work/acked" "$work/consumed") ]]; do
	left >/dev/null
	sleep 1
done
step "dt-group read all $acked acknowledged records"

phase check
for c in $("${compose[@]}" ps -q); do
	[[ $(health "$c") == "running healthy" ]] || fail "$(docker inspect --format '{{.Name}}' "$c") is $(health "$c")"
done
cluster_whole || fail "cluster not whole: $("$sluice" cluster describe)"
# Everything the topic holds, acknowledged or not: the sum of its log end
# offsets (no transactions write to it, so every offset is a record).
end=$("$sluice" group describe dt-group -o json | jq '[.offsets[] | select(.topic == "dt") | .logEndOffset] | add')
consume "$end" "$work/all"
cat "$work/before" "$work/acked" >"$work/want"
lost=$(missing "$work/want" "$work/all" | wc -l)
(( lost == 0 )) || fail "$lost acknowledged records lost: $(missing "$work/want" "$work/all" | head -5 | tr '\n' ' ')"
twice=$(sort "$work/all" | uniq -d | grep -cFxf "$work/want" || true)
(( twice == 0 )) || fail "$twice acknowledged records written more than once"
runs=$(wc -l <"$work/runs")
failed=$(grep -c failed "$work/runs" || true)
consumed=$(wc -l <"$work/consumed")
echo "$(now) end" >>"$work/phases"
step "no acknowledged record lost or doubled: the topic's $end records hold all $(wc -l <"$work/want") acknowledged ones;" \
	"$acked acknowledged under load in $runs produce runs ($failed not acknowledged);" \
	"dt-group read $consumed records, $(( consumed - $(sort -u "$work/consumed" | wc -l) )) of them again;" \
	"consumer restarts: $(grep -c 'consumer exited' "$work/consumer.err" || true)"

# Each phase's duration and its longest stall: the longest time between two
# acknowledged produce runs' ends, counted in the phase the stall began in
# (where the fault was made).
echo "phase                duration  longest stall"
awk 'FNR == NR { at[++n] = $1; name[n] = $2; next }
	$2 == "ok" { if (last) { gap = $1 - last; for (i = 1; i < n; i++) if (last >= at[i] && last < at[i + 1] && gap > worst[i]) worst[i] = gap }; last = $1 }
	END { for (i = 1; i < n; i++) printf "%-20s %7.0fs  %s\n", name[i], at[i + 1] - at[i], (i in worst) ? sprintf("%.1fs", worst[i]) : "-" }' \
	"$work/phases" "$work/runs"
