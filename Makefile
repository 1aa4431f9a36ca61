# Sluice build. `make run` starts a one-process cluster; `make test` runs every
# test. See README.md.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
# Every binary is static and built the same way, so the image (FROM scratch)
# links what the tests already compiled instead of compiling it all again.
GOBUILD = CGO_ENABLED=0 $(GO) build -trimpath
ROOT := $(CURDIR)
BIN := $(ROOT)/bin
MOD := github.com/sluice-io/sluice
export BUF_CACHE_DIR ?= $(ROOT)/.cache/buf

# Packages of every workspace module except integration (which starts real
# processes and runs on its own).
UNIT_PKGS := $(MOD)/gen/go/... $(MOD)/libs/client/... $(MOD)/libs/... $(MOD)/services/... $(MOD)/tools/...
# buf breaking compares the API with this input: the previous commit by
# default (CI runs on main, where comparing with main itself proves nothing).
BUF_BREAKING_AGAINST ?= .git\#ref=HEAD~1
# The container image `make image` builds, and the compose cluster (its own
# project name, so it never touches other containers).
IMAGE ?= sluice:dev
COMPOSE_PROJECT ?= sluice-compose
COMPOSE := docker-compose -p $(COMPOSE_PROJECT) -f $(ROOT)/deploy/compose/docker-compose.yml
COMPOSE_WAIT ?= 180

.PHONY: all build run dev test unit integration helm-check helm-netns-check bench-tools gen check-gen lint bench bench-compare bench-txn bench-kafka bench-security bench-groups bench-connections clean tools image compose-up compose-down deploy-test chaos chaos-planted planted

all: build

## build: build sluiced and sluice into bin/
build:
	$(GOBUILD) -o $(BIN)/ $(MOD)/services/sluiced $(MOD)/tools/sluice

## run: build, then run every role in one process on 127.0.0.1:9090 (Kafka protocol on 9092, etcd on 9093-9094,
## data in ./data/run)
run: build $(BIN)/grpcurl
	$(BIN)/sluiced --roles=all --node-id=1 --data-dir=$(ROOT)/data/run --listen=127.0.0.1:9090 --http-listen=127.0.0.1:9091 --kafka-listen=127.0.0.1:9092 \
		--controller.etcd.client-listen=127.0.0.1:9093 --controller.etcd.peer-listen=127.0.0.1:9094

## dev: build, then run 3 controllers and 3 storage nodes as separate processes
dev: build
	$(BIN)/sluice dev --controllers 3 --storage-nodes 3 --data-dir $(ROOT)/data/dev

## test: unit tests (with the race detector), integration tests and the Helm chart's checks
# helm (several minutes of compiling) is built at the lowest CPU priority while
# the integration tests run, which leave a core idle much of the time
# waiting on timeouts, sessions and elections; the tests keep the CPU first.
test: build unit
	@if [ ! -x $(BIN)/helm ]; then echo "building helm in the background (log: $(BIN)/helm-build.log)"; \
		nice -n 19 $(MAKE) --no-print-directory $(BIN)/helm >$(BIN)/helm-build.log 2>&1 & fi; \
	$(MAKE) --no-print-directory integration; rc=$$?; wait; \
	if [ ! -x $(BIN)/helm ]; then cat $(BIN)/helm-build.log; fi; \
	[ $$rc = 0 ] && $(MAKE) --no-print-directory helm-check

unit:
	$(GO) test -race -count=1 -timeout 15m $(UNIT_PKGS)

integration: build planted
	$(GOBUILD) -o $(BIN)/sluice-chaos $(MOD)/tools/chaos
	SLUICED=$(BIN)/sluiced SLUICE=$(BIN)/sluice SLUICED_PLANTED=$(BIN)/sluiced-planted SLUICE_CHAOS=$(BIN)/sluice-chaos \
		$(GO) test -count=1 -timeout 45m -parallel 3 $(MOD)/integration/...

# Build tools come from tools/buildtools (kept out of go.work so their
# dependencies never reach the runtime build). Rebuilt when its go.mod changes.
# `tools` is what code generation and lint need; the benchmarks' tools (NATS,
# benchstat) and helm are built by the targets that use them, so CI, which
# needs neither benchmark tool, never compiles them.
tools: $(BIN)/.buildtools.stamp
$(BIN)/.buildtools.stamp: tools/buildtools/go.mod tools/buildtools/go.sum
	GOWORK=off $(GO) -C tools/buildtools build -o $(BIN)/ github.com/bufbuild/buf/cmd/buf \
		google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc \
		github.com/fullstorydev/grpcurl/cmd/grpcurl
	touch $@

bench-tools: $(BIN)/.benchtools.stamp
$(BIN)/.benchtools.stamp: tools/buildtools/go.mod tools/buildtools/go.sum
	GOWORK=off $(GO) -C tools/buildtools build -o $(BIN)/ github.com/nats-io/nats-server/v2 golang.org/x/perf/cmd/benchstat
	touch $@

# helm alone, for helm-check.
$(BIN)/helm: tools/buildtools/go.mod tools/buildtools/go.sum
	GOWORK=off $(GO) -C tools/buildtools build -o $(BIN)/ helm.sh/helm/v3/cmd/helm

# The Kubernetes version the chart is checked against: the lowest it supports.
HELM_KUBE_VERSION ?= 1.28.0
# helm keeps its cache and configuration in the repository, not in $$HOME.
export HELM_CACHE_HOME ?= $(ROOT)/.cache/helm/cache
export HELM_CONFIG_HOME ?= $(ROOT)/.cache/helm/config
export HELM_DATA_HOME ?= $(ROOT)/.cache/helm/data

## helm-check: the Helm chart deploy/k8s/sluice without a cluster: helm lint and helm template with the
## default values, with TLS from secrets (ci/tls-values.yaml) and from cert-manager (ci/cert-manager-values.yaml),
## then tools/chartcheck, which parses the rendered manifests and checks volume claims, probes, disruption
## budgets, that the roles' flags agree, and each role's Certificate: its secret, its role and its names
helm-check: build $(BIN)/helm
	$(BIN)/helm lint --strict --kube-version $(HELM_KUBE_VERSION) deploy/k8s/sluice
	$(BIN)/helm lint --strict --kube-version $(HELM_KUBE_VERSION) -f deploy/k8s/sluice/ci/tls-values.yaml deploy/k8s/sluice
	$(BIN)/helm lint --strict --kube-version $(HELM_KUBE_VERSION) -f deploy/k8s/sluice/ci/cert-manager-values.yaml deploy/k8s/sluice
	$(BIN)/helm template sluice deploy/k8s/sluice --kube-version $(HELM_KUBE_VERSION) >/dev/null
	$(BIN)/helm template sluice deploy/k8s/sluice --kube-version $(HELM_KUBE_VERSION) -f deploy/k8s/sluice/ci/tls-values.yaml >/dev/null
	$(BIN)/helm template sluice deploy/k8s/sluice --kube-version $(HELM_KUBE_VERSION) -f deploy/k8s/sluice/ci/cert-manager-values.yaml >/dev/null
	SLUICE_HELM=$(BIN)/helm SLUICED=$(BIN)/sluiced $(GO) test -count=1 $(MOD)/tools/chartcheck

## helm-netns-check: the chart's rendered args run as processes, without Kubernetes (deploy/k8s/netns-check.sh):
## each pod's sluiced in a network namespace of its own, named as the pod, then health, the etcd quorum, a round trip
## with replication factor 3 and a consumer group; about 20 s. Needs root; not part of make test.
helm-netns-check: build $(BIN)/helm
	$(ROOT)/deploy/k8s/netns-check.sh $(BIN)/helm $(BIN)/sluiced $(BIN)/sluice

# grpcurl alone, for the README tour: `make run` needs it, not the other build tools.
$(BIN)/grpcurl: tools/buildtools/go.mod tools/buildtools/go.sum
	GOWORK=off $(GO) -C tools/buildtools build -o $(BIN)/ github.com/fullstorydev/grpcurl/cmd/grpcurl

## gen: regenerate gen/go from proto/ with buf and local plugins
gen: tools
	rm -rf gen/go/sluice
	PATH="$(BIN):$$PATH" $(BIN)/buf generate
	$(GO) run $(MOD)/tools/errgen -o libs/client/errs/codes_gen.go

## check-gen: fail if gen/go differs from what `make gen` produces
check-gen: gen
	@if [ -n "$$(git status --porcelain -- gen/go libs/client/errs/codes_gen.go)" ]; then \
		git status --porcelain -- gen/go libs/client/errs/codes_gen.go; git diff --stat -- gen/go libs/client/errs/codes_gen.go; \
		echo "gen/go is stale: run 'make gen' and commit the result"; exit 1; fi
	@echo "gen/go is up to date"

## lint: go vet, gofmt, buf lint, buf breaking (against the previous commit)
lint: tools
	$(GO) vet $(UNIT_PKGS) $(MOD)/integration/...
	@unformatted=$$(git ls-files '*.go' | grep -v '^gen/' | xargs gofmt -l); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(BIN)/buf lint
	@if git rev-parse -q --verify HEAD~1 >/dev/null && git cat-file -e HEAD~1:buf.yaml 2>/dev/null; then \
		echo "buf breaking --against '$(BUF_BREAKING_AGAINST)'"; $(BIN)/buf breaking --against '$(BUF_BREAKING_AGAINST)'; \
	else echo "buf breaking: no previous commit with buf.yaml to compare with (shallow clone?); skipped"; fi

## bench: build everything, then measure Sluice side by side with NATS JetStream and the
## machine's limits, 3 interleaved rounds (bench/results/<date>.md and .json; see docs/performance.md),
## then the transactions benchmark (bench-txn), the Kafka-protocol benchmark (bench-kafka), the
## security benchmark (bench-security) and bench-compare (skipped with BENCH_COMPARE=0); last,
## <date>-summary.md: every goal of those reports in one table, met or missed, with links to them and to
## the benchstat comparison (`sluice-bench summary`; the consumer-group benchmarks are not part of make bench).
## A benchmark that fails does not stop the others or the summary; make bench fails at the end.
## Extra flags: make bench BENCH_ARGS='--rounds 5' TXN_BENCH_ARGS='--rounds 7' KAFKA_BENCH_ARGS='--rounds 5' SECURITY_BENCH_ARGS='--rounds 7'
## Reports go to BENCH_OUT (default bench/results).
BENCH_OUT ?= $(ROOT)/bench/results
BENCH_COMPARE ?= 1
bench: build tools bench-tools
	$(GOBUILD) -o $(BIN)/sluice-bench $(MOD)/tools/bench
	@# The summary takes the reports written from here on: this invocation's.
	@trap 'exit 130' INT TERM; since=$$(date -u +%Y-%m-%dT%H:%M:%SZ); failed=; \
	run() { name=$$1; shift; echo "$$*"; "$$@" || failed="$$failed $$name"; }; \
	run run $(BIN)/sluice-bench run --bin $(BIN) --out $(BENCH_OUT) $(BENCH_ARGS); \
	run txn $(BIN)/sluice-bench txn --bin $(BIN) --out $(BENCH_OUT) $(TXN_BENCH_ARGS); \
	run kafka $(BIN)/sluice-bench kafka --bin $(BIN) --out $(BENCH_OUT) $(KAFKA_BENCH_ARGS); \
	run security $(BIN)/sluice-bench security --bin $(BIN) --out $(BENCH_OUT) $(SECURITY_BENCH_ARGS); \
	if [ "$(BENCH_COMPARE)" != 0 ]; then run bench-compare $(BENCH_COMPARE_CMD); fi; \
	run summary $(BIN)/sluice-bench summary --out $(BENCH_OUT) --since $$since; \
	if [ -n "$$failed" ]; then echo "make bench: failed:$$failed"; exit 1; fi

## bench-compare: the Go micro-benchmarks (go test -bench, every package with Benchmark functions but those in
## BENCH_SKIP, which take minutes) at BENCH_BASE (default HEAD~1, checked out as a git worktree in a temporary
## directory and removed afterwards) against the working tree; BENCH_COUNT runs of BENCH_TIME each per side,
## base and new alternated; benchstat's table in bench/results/<date>-benchstat.txt. About 6 minutes on 2 cores
## (longer the first time: everything is compiled once with -trimpath, so later runs share the build cache).
## make bench-compare BENCH_BASE=v0.1.0 BENCH_COUNT=10 BENCH_TIME=1s BENCH_PKGS='libs/storage libs/client/record'
BENCH_BASE ?= HEAD~1
BENCH_COUNT ?= 6
BENCH_TIME ?= 100ms
# integration: real processes, minutes per benchmark; libs/verify/check: one
# op checks a 500,000-send history (11 s).
BENCH_SKIP ?= integration libs/verify/check
BENCH_PKGS ?= $(filter-out $(BENCH_SKIP),$(patsubst %/,%,$(sort $(dir $(shell git grep -l '^func Benchmark' -- '*_test.go')))))
BENCH_COMPARE_CMD = $(BIN)/sluice-bench compare --repo $(ROOT) --base $(BENCH_BASE) --count $(BENCH_COUNT) \
	--benchtime $(BENCH_TIME) --benchstat $(BIN)/benchstat --go $(GO) --out $(BENCH_OUT) $(BENCH_PKGS)
bench-compare: bench-tools
	$(GOBUILD) -o $(BIN)/sluice-bench $(MOD)/tools/bench
	$(BENCH_COMPARE_CMD)

## bench-txn: what idempotence and transactions (commits every 1000, 100 and 10 ms) cost a producer of
## 1 KiB records with acks=all, against idempotence off, on one sluiced; 5 interleaved rounds of about
## 12 s each (bench/results/<date>-txn.md and .json; see docs/performance.md, "Transactions and idempotence").
## Extra flags: make bench-txn TXN_BENCH_ARGS='--rounds 7 --round-seconds 15'
bench-txn: build
	$(GOBUILD) -o $(BIN)/sluice-bench $(MOD)/tools/bench
	$(BIN)/sluice-bench txn --bin $(BIN) --out $(BENCH_OUT) $(TXN_BENCH_ARGS)

## bench-kafka: franz-go producing and consuming 1 KiB records through the Kafka listener against the
## SDK over gRPC, on one sluiced (one partition at 1 and 8 MiB fetches, four partitions), 3 interleaved
## rounds, MB/s and server CPU per GB for both
## (bench/results/<date>-kafka.md and .json). Extra flags: make bench-kafka KAFKA_BENCH_ARGS='--records 2000000'
bench-kafka: build
	$(GOBUILD) -o $(BIN)/sluice-bench $(MOD)/tools/bench
	$(BIN)/sluice-bench kafka --bin $(BIN) --out $(BENCH_OUT) $(KAFKA_BENCH_ARGS)

## bench-security: TLS (client certificates required) with ACLs against plaintext, on two sluiced side by side:
## 1 KiB records produced and consumed by the SDK over gRPC and by franz-go over Kafka, as a client holding only
## Write and Read ACLs (not a super user); 5 interleaved rounds, MB/s, the TLS/plaintext ratio and server and
## client CPU per GB, beside the most the record cipher (measured each round) leaves of plaintext
## (bench/results/<date>-security.md and .json; see docs/performance.md, "TLS and ACLs against plaintext").
## Extra flags: make bench-security SECURITY_BENCH_ARGS='--rounds 7 --records 2000000'
bench-security: build
	$(GOBUILD) -o $(BIN)/sluice-bench $(MOD)/tools/bench
	$(BIN)/sluice-bench security --bin $(BIN) --out $(BENCH_OUT) $(SECURITY_BENCH_ARGS)

## bench-connections: what idle clients cost one `sluiced --roles=all`: 5,000 idle SDK producers, 1,000 SDK
## consumers following a quiet topic, 1,000 idle franz-go producers, 500 franz-go consumers long-polling Fetch and
## 500 one-member consumer groups, each with its own connection, opened in steps (server RSS, Go heap, goroutines and fds per connection, idle CPU), with one active client's ack and
## end-to-end latency before, with and after the crowd; then RSS, fds and files with 1,000 and 2,000
## partition replicas (bench/results/<date>-connections.md and .json; see docs/operations.md, "Capacity guide").
## Extra flags: make bench-connections CONN_BENCH_ARGS='--producers 10000 --partition-steps 1000,5000'
bench-connections: build
	$(GOBUILD) -o $(BIN)/sluice-bench $(MOD)/tools/bench
	$(BIN)/sluice-bench connections --bin $(BIN) --out $(BENCH_OUT) $(CONN_BENCH_ARGS)

## bench-groups: consumer-group benchmarks on real processes: an 11th member joining 10 on 900 partitions
## (classic eager, classic cooperative-sticky, consumer protocol) and catch-up reading by a group consumer
## against the assign-mode consumer; medians of 3 rounds (see docs/performance.md, "Consumer groups").
## Extra flags: make bench-groups GROUPS_BENCH_ARGS='-groups.rounds=5'
bench-groups: build
	SLUICED=$(BIN)/sluiced SLUICE=$(BIN)/sluice $(GO) test -count=1 -timeout 60m -run '^$$' \
		-bench 'BenchmarkRebalance|BenchmarkGroupCatchUp' -benchtime 1x $(MOD)/integration -args $(GROUPS_BENCH_ARGS)

## chaos: the checked workload (sluice verify) against real clusters while faults are injected (sluice-chaos):
## the PR tier by default (a fixed list of cases, about 3 minutes); `make chaos SOAK=1h` runs random seeds for an
## hour and prints fault totals; `make chaos SEED=n` replays the one case of a seed (printed for every failure);
## `make chaos CHAOS_ARGS=--negative` runs the negative control (acks=1, unclean leader election: must be caught),
## `CHAOS_ARGS='--negative --control'` the same case with acks=all and unclean election off (must be valid).
## Reports and process logs go to CHAOS_OUT (default data/chaos/<time>). Partitions need root, iproute2 and nftables.
CHAOS_OUT ?= $(ROOT)/data/chaos/$(shell date -u +%Y%m%d-%H%M%S)
chaos: build
	$(GOBUILD) -o $(BIN)/sluice-chaos $(MOD)/tools/chaos
	$(BIN)/sluice-chaos run --sluiced $(BIN)/sluiced --out $(CHAOS_OUT) \
		$(if $(SEED),--seed $(SEED),$(if $(SOAK),--tier soak --duration $(SOAK),--tier pr)) $(CHAOS_ARGS)

## planted: build sluiced with the planted bugs compiled in (-tags sluice_planted) into bin/sluiced-planted;
## each is off unless SLUICE_PLANTED=<name> is set in its environment (libs/planted).
planted:
	$(GOBUILD) -tags sluice_planted -o $(BIN)/sluiced-planted $(MOD)/services/sluiced

## chaos-planted: run the case built for each planted bug against bin/sluiced-planted and require the checker
## to catch every one with the anomaly kind it expects (about 2 minutes).
chaos-planted: planted
	$(GOBUILD) -o $(BIN)/sluice-chaos $(MOD)/tools/chaos
	$(BIN)/sluice-chaos run --sluiced $(BIN)/sluiced-planted --out $(CHAOS_OUT) --planted $(or $(PLANTED),all) $(CHAOS_ARGS)

clean:
	rm -rf $(BIN) $(ROOT)/data $(ROOT)/.cache

## image: build the sluice container image $(IMAGE) (static binaries on scratch, from bin/image/)
image:
	mkdir -p $(BIN)/image/data
	$(GOBUILD) -ldflags='-s -w' -o $(BIN)/image/ $(MOD)/services/sluiced $(MOD)/tools/sluice
	docker build -f deploy/docker/Dockerfile -t $(IMAGE) .

## compose-up: build the image if there is none (make image rebuilds it), start the compose cluster (deploy/compose:
## 3 controllers, 3 storage nodes, replication workers, group and transaction coordinators, each in containers of its
## own) and wait until every container is healthy. Clients: SLUICE_BOOTSTRAP=127.0.0.1:17091 (see docs/operations.md, "Containers").
compose-up:
	@docker image inspect $(IMAGE) >/dev/null 2>&1 || $(MAKE) --no-print-directory image
	SLUICE_IMAGE=$(IMAGE) $(COMPOSE) up -d $(COMPOSE_ARGS)
	@deadline=$$(( $$(date +%s) + $(COMPOSE_WAIT) )); \
	while :; do \
		ids=$$($(COMPOSE) ps -q); \
		states=$$(docker inspect --format '{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}no-healthcheck{{end}}' $$ids); \
		if ! grep -qv ' running healthy$$' <<<"$$states"; then echo "compose cluster healthy: $$(wc -l <<<"$$states") containers"; break; fi; \
		if (( $$(date +%s) > deadline )); then \
			echo "containers not healthy after $(COMPOSE_WAIT)s:"; grep -v ' running healthy$$' <<<"$$states"; \
			echo "logs: $(COMPOSE) logs SERVICE"; exit 1; fi; \
		sleep 2; \
	done

## deploy-test: the compose cluster end to end from no image (deploy/compose/deploy-test.sh): a round trip with
## replication factor 3 and a consumer group through the published ports, then, under acks=all load and a consuming
## group, a storage node, the active controller and the group's coordinator killed, a storage node paused and one
## cut from the network, each healed; a rolling restart of every container (sluice cluster roll); a fourth storage
## node added with a throttled reassignment onto it (replicas compared byte for byte), then drained and removed;
## no acknowledged record may be lost; prints each phase's time and longest producer stall; removes everything it
## made. Needs Docker; about 6-10 minutes; CI runs it after make test (docs/operations.md, "The compose cluster").
deploy-test:
	$(ROOT)/deploy/compose/deploy-test.sh

## compose-down: stop the compose cluster and remove its containers, volumes and network
compose-down:
	$(COMPOSE) down --volumes --remove-orphans --timeout 30
