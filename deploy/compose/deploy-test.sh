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
#     then docker network connect;
#   - a rolling restart of every container (`sluice cluster roll` with a
#     docker restart per process): every one must be restarted, the roll
#     must report success, and no produce run may fail during it;
#   - scale out: a fourth storage node (service storage-4, profile
#     scale-out) is started and a balanced plan (`sluice partition reassign
#     --generate`) moves replicas of dt and of a topic holding several MB
#     onto it with a throttle; --verify until done; the moved replicas must
#     be byte for byte those of the other replicas and the copy no faster
#     than the throttle allows; then scale in: the node is drained
#     (--remove-brokers), verified, stopped and removed.
# At the end every acknowledged record must be in the topic exactly as
# acknowledged and exactly once, the group must have read every one
# (duplicates are counted, not failed), and every container must be healthy
# with the cluster seeing its three controllers and every node alive.
# Prints each phase's duration and the longest gap between acknowledged
# produce runs (the longest stall a producer saw). Bounded in time; removes its containers, volumes, network
# and image on any exit. Run it with `make deploy-test`.
#
# Environment: SLUICE (the host's sluice CLI, default bin/image/sluice, which
# make image builds), DEPLOY_TEST_DEADLINE (seconds, default 1800).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
project=sluice-deploy-test
image=sluice:deploy-test
ports=27 # published on 127.0.0.1:27091-27093, 27101-27104, 27111-27114
sluice=${SLUICE:-$root/bin/image/sluice}
deadline=$(( $(date +%s) + ${DEPLOY_TEST_DEADLINE:-1800} ))
work=$(mktemp -d)
start=$(date +%s)
make_args=(IMAGE="$image" COMPOSE_PROJECT="$project")
# With the scale-out profile, so that ps, logs and down see storage-4 too.
compose=(docker-compose -p "$project" -f "$root/deploy/compose/docker-compose.yml" --profile scale-out)
network=${project}_sluice
export SLUICE_IMAGE=$image SLUICE_PORT_PREFIX=$ports
# On a loaded machine the Docker daemon takes longer than docker-compose's
# 60 s default to create a dozen containers.
export COMPOSE_HTTP_TIMEOUT=${COMPOSE_HTTP_TIMEOUT:-300}
export SLUICE_BOOTSTRAP=127.0.0.1:${ports}091,127.0.0.1:${ports}092,127.0.0.1:${ports}093 SLUICE_CONFIG=
# How long a fault lasts before it is healed: the pause is longer than the
# controllers' session timeout (9 s), so the node is fenced while paused.
fault_secs=15 pause_secs=20
# The scale out's throttle (bytes/s per sending node) and how much the topic
# it moves holds: 6 partitions of about 2 MB.
throttle=262144 grow_records=12000 grow_bytes=1000
# Storage nodes removed by the scale in: registered, no longer alive.
removed=[]

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
	docker ps -aq --filter "label=com.docker.compose.project=$project" | xargs -r docker rm -f >/dev/null 2>&1 || true
	docker volume ls -q --filter "label=com.docker.compose.project=$project" | xargs -r docker volume rm >/dev/null 2>&1 || true
	docker image rm -f "$image" >/dev/null 2>&1 || true
	rm -rf "$work"
	echo "deploy-test: $([[ $rc == 0 ]] && echo PASS || echo FAIL) in $(( $(date +%s) - start ))s"
}
trap cleanup EXIT
# Killed or interrupted is a failure, not a pass.
trap 'exit 143' TERM
trap 'exit 130' INT

# produce FILE [TOPIC [ARGS...]]: produce the lines of FILE with acks=all (to dt by
# default); true when every record was acknowledged.
produce() { timeout "$(left)" "$sluice" produce "${2:-dt}" --acks all --request-timeout 60s "${@:3}" <"$1" >/dev/null; }

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
# reachable, and every registered node alive but those the scale in removed.
cluster_whole() {
	"$sluice" cluster describe -o json 2>/dev/null | jq -e --argjson removed "$removed" '
		(.controllerId // -1) >= 0 and .quorum.hasMajority == true and (.quorum.reachable | length) == 3
		and ([.brokers[] | select(.state != "BROKER_STATE_ALIVE" and (.id as $id | $removed | index($id) | not))] | length) == 0' >/dev/null
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

# storage ID: the container of storage node ID (4-6: storage-1..3, 7: storage-4).
storage() { container "storage-$(( $1 - 3 ))"; }

# replicas TOPIC: one line per partition: its number, leader and replicas
# (comma-separated), from sluice topic describe.
replicas() { "$sluice" topic describe "$1" | awk 'NR > 2 { print $1, $2, $4 }'; }

# log_bytes CONTAINER DIR: the bytes of the .log segments of the partition
# directory DIR (topic-partition) in CONTAINER's /data/logs.
log_bytes() { docker cp "$1:/data/logs/$2" - | tar -tvf - | awk '$NF ~ /\.log$/ { s += $3 } END { print s + 0 }'; }

# log_sum CONTAINER DIR: the SHA-256 of the partition's segments, in offset
# order, concatenated (segments roll at different offsets on different
# replicas; the batches they hold are the same bytes).
log_sum() {
	local d
	d=$(mktemp -d -p "$work")
	docker cp "$1:/data/logs/$2" - | tar -xf - -C "$d"
	if [[ -n $(find "$d/$2" -name '*.log' -size +0) ]]; then
		find "$d/$2" -name '*.log' | sort | xargs cat | sha256sum | cut -c1-16
	else
		echo empty
	fi
	rm -rf "$d"
}

# identical TOPIC: every replica of every partition of TOPIC holds the same
# bytes (call it when nothing is written to TOPIC and its ISRs are full).
# Each node's container is looked up once (docker-compose ps is slow), and
# the copies out of the containers run side by side.
identical() {
	local part leader reps id sums out=$work/sums pids=() lines
	local -A ctr=()
	rm -rf "$out" && mkdir "$out"
	lines=$(replicas "$1")
	for id in $(awk '{ gsub(",", " ", $3); print $3 }' <<<"$lines" | tr ' ' '\n' | sort -u); do
		ctr[$id]=$(storage "$id")
	done
	while read -r part leader reps; do
		for id in ${reps//,/ }; do
			log_sum "${ctr[$id]}" "$1-$part" >"$out/$part.$id" &
			pids+=($!)
		done
	done <<<"$lines"
	wait "${pids[@]}" # not the loaders running in the background
	while read -r part leader reps; do
		sums=$(for id in ${reps//,/ }; do echo "$id $(cat "$out/$part.$id")"; done)
		[[ $(awk '{ print $2 }' <<<"$sums" | sort -u | wc -l) == 1 && $sums != *empty* ]] ||
			fail "$1-$part: replicas differ or are empty: $(tr '\n' ' ' <<<"$sums")"
	done <<<"$lines"
	step "$1: every replica of its $(wc -l <<<"$lines") partitions identical"
}

# failed_since T: produce runs that failed since time T.
failed_since() { awk -v t="$1" '$1 >= t && $2 == "failed"' "$work/runs" | wc -l; }

# reassign_until_done PLAN: --verify until every partition of PLAN is done;
# prints the last --verify output.
reassign_until_done() {
	until "$sluice" partition reassign --verify --file "$1" >"$work/verify.out" 2>&1 && grep -q '^All ' "$work/verify.out"; do
		left >/dev/null
		sleep 1
	done
	cat "$work/verify.out"
}

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
# The topic the scale out moves: several MB that no producer changes.
"$sluice" topic create grow -p 6 -r 3 >/dev/null
# Keyed, so every partition gets records: unkeyed ones go to partitions in
# sticky batches, and one partition may get none (its replicas then hold
# nothing to compare).
awk -v n="$grow_records" -v b="$grow_bytes" 'BEGIN { pad = sprintf("%*s", b, ""); gsub(/ /, "x", pad); for (i = 1; i <= n; i++) print "grow-" i ":" pad }' >"$work/grow"
produce "$work/grow" grow --key-separator : || fail "producing $grow_records records to grow"
step "grow: $grow_records records of $grow_bytes bytes"

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

phase roll
# The restart command: docker restart (SIGTERM, up to 30 s, then SIGKILL, as
# the compose file's stop_grace_period) of the container whose address or
# host name the roll names ({host}: a registered node's address, a
# controller's host name).
cat >"$work/restart" <<EOF
#!/usr/bin/env bash
set -euo pipefail
for c in \$(docker ps -q --filter label=com.docker.compose.project=$project); do
	if [[ " \$(docker inspect --format '{{.Config.Hostname}} {{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' "\$c") " == *" \$1 "* ]]; then
		exec docker restart -t 30 "\$c" >/dev/null
	fi
done
echo "no container at \$1" >&2
exit 1
EOF
chmod +x "$work/restart"
roll_start=$(now)
procs=$("${compose[@]}" ps -q | wc -l)
for c in $("${compose[@]}" ps -q); do echo "$c $(docker inspect --format '{{.State.StartedAt}}' "$c")"; done >"$work/started"
timeout "$(left)" "$sluice" cluster roll --restart-cmd "$work/restart {host}" --step-timeout 4m >"$work/roll.log" 2>&1 ||
	{ cat "$work/roll.log"; fail "sluice cluster roll"; }
grep -q "roll complete: $procs processes restarted" "$work/roll.log" || { cat "$work/roll.log"; fail "the roll did not restart all $procs processes"; }
while read -r c at; do
	[[ $(docker inspect --format '{{.State.StartedAt}}' "$c") != "$at" ]] || fail "$(docker inspect --format '{{.Name}}' "$c") was not restarted"
	wait_healthy "$c"
done <"$work/started"
grep -E 'step took|roll complete' "$work/roll.log" | sed 's/^/    /'
wait_cluster_whole
failed=$(failed_since "$roll_start")
(( failed == 0 )) || fail "$failed produce runs failed during the roll: $(tail -3 "$work/producer.err" | tr '\n' ' ')"
step "roll: all $procs containers restarted one at a time, no produce run failed"

phase scale-out
"${compose[@]}" up -d --no-deps storage-4 >"$work/storage-4.log" 2>&1 || { cat "$work/storage-4.log"; fail "starting storage-4"; }
wait_healthy "$(container storage-4)"
wait_cluster_whole
"$sluice" partition reassign --generate --topics dt,grow --brokers 4,5,6,7 >"$work/generate.out"
awk 'prev ~ /^Proposed/ { print } { prev = $0 }' "$work/generate.out" >"$work/plan.json"
jq -e '.partitions | length > 0' "$work/plan.json" >/dev/null || { cat "$work/generate.out"; fail "no proposed plan"; }
moved=$(jq -r '.partitions[] | select(.replicas | index(7)) | "\(.topic) \(.partition)"' "$work/plan.json")
step "plan: $(wc -l <<<"$moved") of 12 partitions (dt and grow) get a replica on node 7: $(tr '\n' ',' <<<"$moved")"
# The bytes each leader sends to node 7 for grow (dt is small and changing),
# and the least time the throttle allows for them.
declare -A sends=()
while read -r part leader reps; do
	grep -qx "grow $part" <<<"$moved" || continue
	sends[$leader]=$(( ${sends[$leader]:-0} + $(log_bytes "$(storage "$leader")" "grow-$part") ))
done < <(replicas grow)
need=0
for l in "${!sends[@]}"; do
	need=$(awk -v b="${sends[$l]}" -v r="$throttle" -v n="$need" 'BEGIN { print (b / r > n) ? b / r : n }')
	step "leader $l sends $(awk -v b="${sends[$l]}" 'BEGIN { printf "%.2f MB", b / 1e6 }') of grow to node 7"
done
t0=$(now)
"$sluice" partition reassign --execute --file "$work/plan.json" --throttle "$throttle" >"$work/execute.out" 2>&1 ||
	{ cat "$work/execute.out"; fail "reassign --execute"; }
reassign_until_done "$work/plan.json" >"$work/verify-plan.out"
took=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
grep -q 'throttle removed' "$work/verify-plan.out" || { cat "$work/verify-plan.out"; fail "--verify did not remove the throttle"; }
step "moves done in ${took}s; at $throttle bytes/s per sender they need at least ${need}s;" \
	"$(for l in "${!sends[@]}"; do awk -v l="$l" -v b="${sends[$l]}" -v t="$took" 'BEGIN { printf "leader %s %.2f MB/s, ", l, b / t / 1e6 }'; done)limit $(awk -v r="$throttle" 'BEGIN { printf "%.2f MB/s", r / 1e6 }')"
awk -v t="$took" -v n="$need" 'BEGIN { exit !(t >= 0.7 * n) }' || fail "the moves ran faster than the throttle allows (${took}s, need ${need}s)"
jq -r '.partitions[] | "\(.topic) \(.partition) \(.replicas | map(tostring) | join(","))"' "$work/plan.json" >"$work/planned"
while read -r topic part want; do
	got=$(replicas "$topic" | awk -v p="$part" '$1 == p { print $3 }')
	[[ $got == "$want" ]] || fail "$topic-$part: replicas $got, planned $want"
done <"$work/planned"
identical grow
failed=$(failed_since "$t0")
step "scale out: node 7 holds $(jq '[.partitions[] | select(.replicas | index(7))] | length' "$work/plan.json") replicas;" \
	"$failed produce runs failed during the moves"

phase scale-in
"$sluice" partition reassign --generate --remove-brokers 7 >"$work/drain.out"
awk 'prev ~ /^Proposed/ { print } { prev = $0 }' "$work/drain.out" >"$work/drain.json"
"$sluice" partition reassign --execute --file "$work/drain.json" >"$work/execute.out" 2>&1 ||
	{ cat "$work/execute.out"; fail "reassign --execute of the drain"; }
reassign_until_done "$work/drain.json" >/dev/null
if "$sluice" topic describe | awk 'NR > 2 && $4 ~ /(^|,)7(,|$)/ { found = 1 } END { exit !found }'; then
	fail "node 7 still holds replicas: $("$sluice" topic describe | awk '$4 ~ /(^|,)7(,|$)/')"
fi
"${compose[@]}" stop -t 30 storage-4 >/dev/null 2>&1
"${compose[@]}" rm -f storage-4 >/dev/null 2>&1
docker volume rm "${project}_storage-4" >/dev/null
removed=[7]
wait_cluster_whole
wait_isr
step "scale in: node 7 drained ($(jq '.partitions | length' "$work/drain.json") partitions moved off), stopped, its container and volume removed"

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
wait_isr
identical dt
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

# Each phase's duration, its longest stall (the longest time between two
# acknowledged produce runs' ends, counted in the phase the stall began in,
# where the fault was made) and the produce runs that failed in it.
echo "phase                duration  longest stall  failed runs"
awk 'FNR == NR { at[++n] = $1; name[n] = $2; next }
	{ for (i = 1; i < n; i++) if ($1 >= at[i] && $1 < at[i + 1]) { runs[i]++; if ($2 == "failed") failed[i]++ } }
	$2 == "ok" { if (last) { gap = $1 - last; for (i = 1; i < n; i++) if (last >= at[i] && last < at[i + 1] && gap > worst[i]) worst[i] = gap }; last = $1 }
	END { for (i = 1; i < n; i++) printf "%-20s %7.0fs  %13s  %s\n", name[i], at[i + 1] - at[i], (i in worst) ? sprintf("%.1fs", worst[i]) : "-", (i in runs) ? sprintf("%d of %d", failed[i], runs[i]) : "-" }' \
	"$work/phases" "$work/runs"
