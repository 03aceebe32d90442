# TideGPU — build, test and verify.
GO            ?= go
BIN           ?= bin
CONTROLLER_GEN = $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
# Tests that need a real API server find it here (built once, cached).
ENVTEST_ASSETS = $(shell hack/envtest.sh)
CHART         = deploy/helm/tidegpu
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Release builds: static (no cgo), no file paths, no symbol table or DWARF.
RELEASE_FLAGS  = -trimpath -ldflags "-s -w -X github.com/tidegpu/tidegpu/internal/cli.Version=$(VERSION)"
IMAGE_ARCH    ?= $(shell $(GO) env GOARCH)
IMAGE_DIR     ?= $(BIN)/image
IMAGE_TAG     ?= tidegpu:$(VERSION)

# The packages whose tests run longest (about two minutes each with -race), listed
# first so that `go test` starts them first: the short packages then fill the other
# parallel slot instead of one long package running alone at the end.
LONG_TEST_PKGS = ./test/operator ./test/e2e ./test/chaos ./test/dashboard

.PHONY: all build test test-short generate manifests helm-lint image release fmt vet verify bench fuzz clean

all: build

## build: the tidegpu binary in bin/
build:
	$(GO) build -o $(BIN)/tidegpu ./cmd/tidegpu

## image: the OCI image layout in bin/image (no Docker daemon: hack/image writes it with
## go-containerregistry): the stripped static binary for linux/$(IMAGE_ARCH), run as 65532:65532
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build $(RELEASE_FLAGS) -o $(BIN)/linux-$(IMAGE_ARCH)/tidegpu ./cmd/tidegpu
	GOWORK=off $(GO) -C hack/image run . -binary $(abspath $(BIN)/linux-$(IMAGE_ARCH)/tidegpu) \
		-arch $(IMAGE_ARCH) -out $(abspath $(IMAGE_DIR)) -tag $(IMAGE_TAG) -version $(VERSION)

## release: stripped static binaries for linux amd64 and arm64 and their SHA256SUMS in bin/release
release:
	rm -rf $(BIN)/release && mkdir -p $(BIN)/release
	for a in amd64 arm64; do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build $(RELEASE_FLAGS) -o $(BIN)/release/tidegpu-linux-$$a ./cmd/tidegpu || exit 1; \
	done
	cd $(BIN)/release && sha256sum tidegpu-linux-* > SHA256SUMS
	cat $(BIN)/release/SHA256SUMS

## test: every test, with the race detector, on real processes, sockets and API server;
## then the benchmark packages (they compare against a peer side by side, so they run
## one package at a time, without the race detector slowing one side). The tests that
## run the tidegpu binary as a process share the one `build` makes (TIDEGPU_TEST_BINARY,
## TIDEGPU_BIN) instead of linking it once per package. The tests that hold allocation
## counts skip themselves under the race detector (its sync.Pool drops items), so they
## run once more without it.
test: build
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" TIDEGPU_TEST_BINARY="$(abspath $(BIN)/tidegpu)" \
		$(GO) test -race -count=1 -timeout 20m $$($(GO) list $(LONG_TEST_PKGS) ./... | grep -v /bench/)
	$(GO) test -count=1 -timeout 5m -run 'Allocations|ReusesPerConnection' ./internal/gateway/...
	TIDEGPU_BIN="$(abspath $(BIN)/tidegpu)" $(GO) test -count=1 -p 1 -timeout 20m ./bench/...

## test-short: the fast unit tests only
test-short:
	$(GO) test -short -count=1 ./...

## generate: deepcopy for the API types
generate:
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

## manifests: CRDs and RBAC under config/
manifests:
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=tidegpu-operator paths=./internal/controller/... output:rbac:artifacts:config=config/rbac
	@# The Helm chart keeps copies (a chart cannot read files outside itself).
	rm -f $(CHART)/crds/*.yaml
	cp config/crd/bases/*.yaml $(CHART)/crds/
	cp config/rbac/role.yaml $(CHART)/files/operator-role.yaml

## helm-lint: helm lint --strict and helm template of the chart (helm built by hack/helm.sh);
## test/helm also applies the output of every values file to a real API server
helm-lint:
	$(eval HELM := $(shell hack/helm.sh))
	$(HELM) lint --strict $(CHART)
	for f in $(CHART)/ci/*-values.yaml; do $(HELM) lint --strict $(CHART) -f $$f || exit 1; done
	$(HELM) template tidegpu $(CHART) --namespace tidegpu-system >/dev/null

fmt:
	gofmt -l -w $$(git ls-files '*.go')

vet:
	$(GO) vet ./...

## verify: regenerate, format and vet, then fail if anything changed
verify: generate manifests fmt vet
	$(GO) mod tidy
	cd hack/helm && GOWORK=off $(GO) mod tidy
	cd hack/image && GOWORK=off $(GO) mod tidy
	@if [ -n "$$(git status --porcelain)" ]; then \
		echo "verify: the tree is dirty after generate/fmt/tidy:"; git status --porcelain; git --no-pager diff --stat; exit 1; fi

## bench: benchmarks recorded in BENCHMARKS.md
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...

## fuzz: each fuzz target for a short while
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 20s ./internal/config/

clean:
	rm -rf $(BIN)
