#!/usr/bin/env bash
# The compose cluster end to end, from no image: build the image, start the
# cluster, a produce/consume round trip with replication factor 3 and a
# consumer group through the published ports (the sluice CLI on this host),
# then SIGKILL a storage node's container, produce more with acks=all, start
# it again and check that no acknowledged record is lost and that the group
# consumes the rest. Bounded in time; removes its containers, volumes,
# network and image on any exit. Run it with `make deploy-test`.
#
# Environment: SLUICE (the host's sluice CLI, default bin/image/sluice, which
# make image builds), DEPLOY_TEST_DEADLINE (seconds, default 900).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
project=sluice-deploy-test
image=sluice:deploy-test
ports=27 # published on 127.0.0.1:27091-27093, 27101-27103, 27111-27113
sluice=${SLUICE:-$root/bin/image/sluice}
deadline=$(( $(date +%s) + ${DEPLOY_TEST_DEADLINE:-900} ))
work=$(mktemp -d)
start=$(date +%s)
make_args=(IMAGE="$image" COMPOSE_PROJECT="$project")
compose=(docker-compose -p "$project" -f "$root/deploy/compose/docker-compose.yml")
export SLUICE_IMAGE=$image SLUICE_PORT_PREFIX=$ports
export SLUICE_BOOTSTRAP=127.0.0.1:${ports}091,127.0.0.1:${ports}092,127.0.0.1:${ports}093 SLUICE_CONFIG=

step() { echo "=== $(( $(date +%s) - start ))s: $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
left() { local l=$(( deadline - $(date +%s) )); (( l > 0 )) || fail "deadline passed"; echo "$l"; }

cleanup() {
	rc=$?
	if (( rc != 0 )); then
		echo "--- logs of the containers (last 20 lines each)"
		"${compose[@]}" logs --tail 20 2>&1 | tail -300 || true
	fi
	step "cleaning up"
	"${compose[@]}" down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1 || true
	docker image rm -f "$image" >/dev/null 2>&1 || true
	rm -rf "$work"
	echo "deploy-test: $([[ $rc == 0 ]] && echo PASS || echo FAIL) in $(( $(date +%s) - start ))s"
}
trap cleanup EXIT

# produce FILE: produce the lines of FILE with acks=all; true when every
# record was acknowledged.
produce() { timeout "$(left)" "$sluice" produce dt --acks all --request-timeout 60s <"$1" >/dev/null; }

# consume_all N OUT [ARGS...]: read up to N records from the beginning.
consume() {
	local n=$1 out=$2
	shift 2
	timeout "$(left)" "$sluice" consume dt --from-beginning --max-messages "$n" --timeout 90s "$@" >"$out"
}

# missing ACKED GOT: lines of ACKED that are not in GOT.
missing() { comm -23 <(sort -u "$1") <(sort -u "$2"); }

step "removing $image and any earlier $project cluster"
"${compose[@]}" down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1 || true
docker image rm -f "$image" >/dev/null 2>&1 || true

step "make image && make compose-up"
timeout "$(left)" make --no-print-directory image "${make_args[@]}" >"$work/image.log" 2>&1 || { tail -20 "$work/image.log"; fail "make image"; }
[[ -x $sluice ]] || fail "no sluice CLI at $sluice"
step "image $image built"
timeout "$(left)" make --no-print-directory compose-up "${make_args[@]}" >"$work/up.log" 2>&1 || { tail -20 "$work/up.log"; fail "make compose-up"; }
tail -1 "$work/up.log"

step "topic dt: 6 partitions, replication factor 3"
"$sluice" topic create dt -p 6 -r 3 >/dev/null
seq -f 'before-%g' 1 3000 >"$work/before"
produce "$work/before" || fail "producing the first 3000 records"
consume 3000 "$work/got1"
[[ -z $(missing "$work/before" "$work/got1") ]] || fail "round trip: $(missing "$work/before" "$work/got1" | wc -l) records missing"
consume 3000 "$work/group1" --group dt-group
[[ -z $(missing "$work/before" "$work/group1") ]] || fail "group: $(missing "$work/before" "$work/group1" | wc -l) records missing"
step "round trip: 3000 records produced and read back, and by group dt-group"

victim=$("${compose[@]}" ps -q storage-2)
step "docker kill storage-2 ($victim), produce 3000 more with acks=all"
docker kill "$victim" >/dev/null
seq -f 'during-%g' 1 3000 >"$work/during"
: >"$work/acked"
for i in 0 1 2; do
	sed -n "$(( i * 1000 + 1 )),$(( i * 1000 + 1000 ))p" "$work/during" >"$work/chunk"
	if produce "$work/chunk"; then cat "$work/chunk" >>"$work/acked"; else echo "chunk $i not acknowledged (not counted)"; fi
done
acked=$(wc -l <"$work/acked")
(( acked > 0 )) || fail "nothing acknowledged with one storage node down"
step "$acked records acknowledged with storage-2 down; docker start storage-2"
docker start "$victim" >/dev/null
until [[ $(docker inspect --format '{{.State.Health.Status}}' "$victim") == healthy ]]; do
	left >/dev/null
	sleep 1
done
step "storage-2 healthy again; waiting for every partition's ISR to hold 3 replicas"
until "$sluice" topic describe dt | awk 'NR > 2 && $5 !~ /^[0-9]+,[0-9]+,[0-9]+$/ { bad = 1 } END { exit bad }'; do
	left >/dev/null
	sleep 1
done
cat "$work/before" "$work/acked" >"$work/all"
total=$(wc -l <"$work/all")
consume "$total" "$work/got2"
lost=$(missing "$work/all" "$work/got2" | wc -l)
(( lost == 0 )) || fail "$lost acknowledged records lost: $(missing "$work/all" "$work/got2" | head -5 | tr '\n' ' ')"
consume "$acked" "$work/group2" --group dt-group
[[ -z $(missing "$work/acked" "$work/group2") ]] || fail "group after the kill: $(missing "$work/acked" "$work/group2" | wc -l) records missing"
step "no acknowledged record lost: all $total read back; dt-group consumed the $acked new ones"
