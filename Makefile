# svm-apiserver — the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
KUBECTL := $(CURDIR)/.venv/bin/kubectl
# Flags for `make run`, e.g. make run ARGS="--etcd-servers http://127.0.0.1:2379"
ARGS ?=

.PHONY: all build run test test-under-load test-real lint deny fmt bench bench-real deps certs deploy undeploy image clean

all: build

deps:
	@hack/ensure-deps.sh

build:
	@hack/ensure-deps.sh build
	$(CARGO) build --release
	@hack/no-test-hooks.sh "$${CARGO_TARGET_DIR:-target}/release/svm-apiserver"

## run: serve on https://127.0.0.1:8443 (embedded store in .dev/data unless --etcd-servers is given);
## writes .dev/kubeconfig, so `KUBECONFIG=.dev/kubeconfig kubectl get storageversionmigrations` works.
run:
	@hack/ensure-deps.sh build kubectl
	$(CARGO) run --release -- serve $(ARGS)

## test: install what the tests need, check formatting and lints, run every test — the
## real-cluster suite on the kube-apiserver of ../shared/envtest (KUBEBUILDER_ASSETS) included.
## The second clippy: the first (--all-targets, so with the dev-dependencies) lints svm-volumes
## with its test hooks; this one without them, as the product builds it (docs/testing.md).
test:
	@hack/ensure-deps.sh
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --workspace -- -D warnings
	$(CARGO) clippy -p svm-volumes --all-targets -- -D warnings
	.dev/tools/bin/cargo-deny check licenses bans sources
	@assets=$$(hack/envtest.sh) || { echo "make test: preparing the real-cluster suite failed (above)" >&2; exit 1; }; \
	if [ -n "$$assets" ]; then export KUBEBUILDER_ASSETS="$$assets"; else export SVM_REAL_CLUSTER=skip; fi; \
	echo "KUBEBUILDER_ASSETS=$${KUBEBUILDER_ASSETS:-(none: the real-cluster suite is NOT RUN)}"; \
	SVM_KUBECTL=$(KUBECTL) CARGO=$(CARGO) hack/test.sh; status=$$?; \
	[ -n "$$assets" ] || hack/envtest.sh >/dev/null; \
	exit $$status

## test-under-load: the load rehearsal, `make test` with one core kept busy by a CPU burner
## (SVM_LOAD_BURNERS=n for more); it must pass as on a quiet machine, only slower.
test-under-load:
	@hack/test-under-load.sh test

## test-real: only the real-cluster suite (svm-apiserver on a real kube-apiserver and etcd).
test-real:
	@hack/ensure-deps.sh
	@assets=$$(hack/envtest.sh); [ -n "$$assets" ] || { echo "no kube-apiserver: see above" >&2; exit 1; }; \
	KUBEBUILDER_ASSETS="$$assets" SVM_KUBECTL=$(KUBECTL) $(CARGO) test --test real_cluster -- --nocapture

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --workspace -- -D warnings
	$(CARGO) clippy -p svm-volumes --all-targets -- -D warnings

## deny: what may enter the dependency graph (deny.toml: licenses, banned crates, sources).
deny:
	@hack/ensure-deps.sh deny
	.dev/tools/bin/cargo-deny check licenses bans sources

fmt:
	$(CARGO) fmt --all

## bench: benchmarks, printed as tables (never asserted).
bench:
	@hack/ensure-deps.sh build etcd kubectl
	$(CARGO) bench --bench api
	$(CARGO) bench --bench migrate
	$(CARGO) bench --bench trigger
	$(CARGO) bench --bench edge
	@assets=$$(hack/envtest.sh); [ -n "$$assets" ] || { echo "no kube-apiserver: the fair-share bench is NOT RUN" >&2; exit 1; }; \
	KUBEBUILDER_ASSETS="$$assets" SVM_KUBECTL=$(KUBECTL) $(CARGO) bench --bench fair_share

## bench-real: the migrator on the real kube-apiserver (KUBEBUILDER_ASSETS, on etcd 3.5): N
## objects of 1/10/100 KiB, ours (auto, hand-tuned; streamed) vs full GET+PUT, a QPS cap, a
## second client. SVM_BENCH_REAL_OBJECTS (10000), SVM_BENCH_REAL_SIZES (1,10,100) and
## SVM_BENCH_REAL_RUNS (auto,16,64,getput,nb-auto,qps,load; `nb-<c>` with a neighbour GETting,
## `paged` reads in pages, `delay-<c>` through a 2 ms-each-way loopback delay, `lists` the second
## client alone, `writes` the cost of each no-op write) choose the runs.
bench-real:
	@hack/ensure-deps.sh build etcd kubectl
	@assets=$$(hack/envtest.sh); [ -n "$$assets" ] || { echo "no kube-apiserver: the real-apiserver bench is NOT RUN" >&2; exit 1; }; \
	KUBEBUILDER_ASSETS="$$assets" SVM_KUBECTL=$(KUBECTL) $(CARGO) bench --bench real

## chaos: 50 chaos trials (two replicas, etcd and the double; kill -9 / SIGSTOP of the leader,
## etcd restarts, 5xx and 429 storms, stream cuts; a table per trial). `make test` runs 3.
## CHAOS_TRIALS=n for another count; SVM_CHAOS_SEED=s replays (trial i runs seed s+i).
CHAOS_TRIALS ?= 50
chaos:
	@hack/ensure-deps.sh build etcd
	SVM_CHAOS_TRIALS=$(CHAOS_TRIALS) SVM_CHAOS_REPORT=$(CURDIR)/target/chaos-report.md \
		$(CARGO) test --release --test chaos chaos_trials -- --nocapture

## certs: a development PKI in certs/ (serving cert, CA, admin and front-proxy client certs).
certs:
	@hack/ensure-deps.sh build
	$(CARGO) run --release -- certs --dir certs

## image: the container image svm-apiserver:<Cargo.toml version> (static musl binary on scratch,
## built with podman or buildah; IMAGE=<registry>/svm-apiserver to name it otherwise).
image:
	@hack/ensure-deps.sh build
	@hack/image.sh

## deploy: install on the cluster of the current kubeconfig (see deploy/README.md).
deploy: certs
	@hack/ensure-deps.sh kubectl
	$(KUBECTL) apply -k deploy/

undeploy:
	$(KUBECTL) delete -k deploy/ --ignore-not-found

clean:
	$(CARGO) clean
	rm -rf .dev
