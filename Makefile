# sglroute developer tasks. `make run` and `make test` are the README's two
# quick-start commands; keep them working on a fresh machine.

GO      ?= go
BIN     := bin
FUZZTIME ?= 20s

.PHONY: run test build caddy sglsim xcaddy check-fmt vet unit fuzz bench clean

## run: build, start 4 simulated SGLang workers and Caddy with Caddyfile.example
run: build
	bash scripts/run.sh

## test: everything CI runs
test: check-fmt vet build unit fuzz xcaddy
	@echo "make test: all checks passed"

build: caddy sglsim

caddy:
	$(GO) build -o $(BIN)/caddy ./cmd/caddy

sglsim:
	$(GO) build -o $(BIN)/sglsim ./cmd/sglsim

## xcaddy: build Caddy the way users do, from the pinned manifest xcaddy.json
xcaddy:
	$(GO) test -C build/xbuild ./...
	$(GO) run -C build/xbuild . -manifest ../../xcaddy.json -o ../../$(BIN)/caddy-xcaddy
	$(BIN)/caddy-xcaddy list-modules | grep -q 'selection_policies.sgl_cache_aware'
	$(BIN)/caddy-xcaddy list-modules | grep -q 'http.handlers.sglroute'
	@echo "xcaddy build: sgl modules present"

check-fmt:
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 ./...

## fuzz: short runs of every fuzz target (CI); raise FUZZTIME locally
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzTreeAgainstModel$$' -fuzztime $(FUZZTIME) ./tree
	$(GO) test -run '^$$' -fuzz '^FuzzParseAgainstEncodingJSON$$' -fuzztime $(FUZZTIME) ./internal/llmreq

## bench: the hot-path micro-benchmarks recorded in BENCHMARKS.md
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./tree ./internal/llmreq ./selection

clean:
	rm -rf $(BIN)
