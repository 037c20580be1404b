# Rampart — see README.md. `make test` is what CI runs.
SHELL := /bin/bash
BIN := bin
GO ?= go
CONTROLLER_GEN := cd hack/tools && $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: all build image assets cluster-assets test-deps generate test unit integration lint up down clean fuzz fuzz-smoke secret-scan compat

all: build

build: ## build bin/rampart (and bin/kubectl-rampart, the kubectl plugin)
	$(GO) build -ldflags "-X github.com/rampart-io/rampart/internal/operations/cli.Version=$(VERSION)" -o $(BIN)/rampart ./cmd/rampart
	ln -sf rampart $(BIN)/kubectl-rampart

image: ## the chart's image as an OCI archive, bin/rampart-image.tar (static binary, CA certificates, user 65532; no Docker engine: hack/image)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X github.com/rampart-io/rampart/internal/operations/cli.Version=$(VERSION)" -o $(BIN)/image/rampart ./cmd/rampart
	cd hack/image && $(GO) run . -binary $(abspath $(BIN))/image/rampart -out $(abspath $(BIN))/rampart-image.tar -tag rampart:$(VERSION)

assets: ## build every binary the clusters and tests run (only what is missing or outdated): the local control plane, the real nodes' kubelet and runc, helm and the monitoring CRDs into bin/k8s, the storage tests' S3 server into bin/s3
	bash hack/assets.sh

cluster-assets: ## build only what `rampart up` runs (the control plane, etcd, kwok) into bin/k8s
	bash hack/assets.sh cluster

test-deps: ## install the Debian packages the tests need and this machine lacks (apt-get; nothing when all are there)
	bash hack/test-deps.sh

generate: ## regenerate deepcopy code, CRDs and RBAC from the API types and markers
	$(CONTROLLER_GEN) object:headerFile=../boilerplate.go.txt paths=../../api/...
	$(CONTROLLER_GEN) crd:crdVersions=v1 paths=../../api/... output:crd:artifacts:config=../../charts/rampart/crds
	$(CONTROLLER_GEN) rbac:roleName=rampart-manager paths=../../internal/... output:rbac:artifacts:config=../../charts/rampart/files/rbac

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

unit: ## tests that need no cluster
	$(GO) test -short ./...

# The integration tests start real control planes (one per test package);
# they find the binaries through RAMPART_ASSETS and RAMPART_BIN, and the
# storage tests their S3 server through RAMPART_S3_SERVER, and a real node
# the chart's image (make image) through RAMPART_IMAGE. test-deps comes
# first: make assets builds runc only with libseccomp-dev.
test: test-deps lint build image assets ## everything: install what the tests need, lint, unit and integration tests against real control planes
	GO=$(GO) bash hack/test.sh

compat: ## the admission, compiled-policy and chart tests against the two Kubernetes minors before the pin (each built once into bin/k8s-VERSION; VERSIONS="v1.36.3 v1.35.4" by default)
	GO=$(GO) bash hack/compat.sh $(VERSIONS)

FUZZTIME ?= 5m
fuzz: ## run every fuzz target for FUZZTIME each (default 5m); crashers land in testdata/fuzz and replay in go test
	FUZZTIME=$(FUZZTIME) GO=$(GO) bash hack/fuzz.sh

secret-scan: ## grep the logs of the last make test (bin/test-logs) for keys, tokens and canary Secret values
	bash hack/secret-scan.sh $(BIN)/test-logs

fuzz-smoke: ## run every fuzz target for 5s (make test runs it beside the Go tests)
	FUZZTIME=5s GO=$(GO) bash hack/fuzz.sh

up: build cluster-assets ## build what `rampart up` runs and start a protected local cluster in .rampart (detached)
	$(BIN)/rampart up --detach --dir .rampart

down: ## stop the cluster `make up` started
	$(BIN)/rampart down --dir .rampart

clean:
	rm -rf $(BIN)/rampart $(BIN)/kubectl-rampart .rampart
