# crosscheck — make run starts the service on the embedded default; make test runs every test.
GO        ?= go
BIN       ?= bin/crosscheck
# The version crosscheck version prints: the commit (and -dirty with
# uncommitted changes), or a tag on it.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Release builds: no file paths of the build machine, no symbol table or
# DWARF (a third smaller).
BUILDFLAGS = -trimpath -ldflags "-s -w -X main.Version=$(VERSION)"
# The build's recipe pipes go build through a progress line: a failed
# build must still fail make.
SHELL     := bash
.SHELLFLAGS := -o pipefail -c
FUZZTIME  ?= 10s
BENCH_OUT ?= bench/results.json
# The real-model tests' host (internal/providers/realmodel): node-llama-cpp
# and its prebuilt Linux x64 llama.cpp, at the versions of its
# package-lock.json. The lock file holds no other platform's optional binary
# package, which npm ci refuses: npm install --no-save installs the locked
# versions without rewriting the lock; --omit=optional leaves out the GPU
# builds, --ignore-scripts the postinstall that would try to build llama.cpp.
REALMODEL := internal/providers/realmodel/testdata

.PHONY: run build test fuzz vet bench clean realmodel

run: build ## build bin/crosscheck if anything changed, then start `crosscheck serve` (embedded NATS JetStream, simulated models); honours CROSSCHECK_* settings
	$(BIN) serve

# go build -v names each package as it compiles it (only those not in the
# build cache): the first build, with empty caches, downloads the modules
# (go list names each) and then compiles every package; later builds compile
# what changed, and relink only when something did.
build: ## build the stripped binary into bin/, with a line of progress
	@total=$$($(GO) list -deps ./cmd/crosscheck | wc -l) && \
	$(GO) build -v $(BUILDFLAGS) -o $(BIN) ./cmd/crosscheck 2>&1 | awk -v total=$$total -v tty=$$([ -t 2 ] && echo 1) ' \
		/^[A-Za-z0-9_.~+\/-]+$$/ { n++; \
			if (tty) printf "\r\033[Kcompiling package %d of at most %d: %s", n, total, $$0; \
			else if (n % 100 == 1) printf "compiling package %d of at most %d: %s\n", n, total, $$0; \
			fflush(); next } \
		{ if (tty && n) printf "\n"; print } \
		END { if (tty && n) printf "\r\033[K"; if (n) printf "compiled %d package%s into %s\n", n, (n == 1 ? "" : "s"), "$(BIN)" }'

vet:
	$(GO) vet ./...

test: vet realmodel ## every test, with the race detector
	$(GO) test -race -count=1 -timeout 25m ./...

realmodel: $(REALMODEL)/node_modules/.installed ## install the real-model tests' runtime (Node 20 and npm needed)

$(REALMODEL)/node_modules/.installed: $(REALMODEL)/package.json $(REALMODEL)/package-lock.json
	@if command -v npm >/dev/null; then \
		cd $(REALMODEL) && npm install --no-save --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null && touch node_modules/.installed; \
	else echo "npm not found: the real-model tests skip (and fail under CI=true)"; fi

bench: build ## measure the service beside the raw JetStream limit under both fsync policies; JSON to $(BENCH_OUT)
	BENCH_OUT=$(BENCH_OUT) $(BIN) bench

fuzz: ## run each fuzz target for FUZZTIME
	$(GO) test ./internal/keys -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/queries -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/handlers -run '^$$' -fuzz FuzzSSEFrame -fuzztime $(FUZZTIME)
	$(GO) test ./internal/handlers -run '^$$' -fuzz FuzzCheckUTF8 -fuzztime $(FUZZTIME)
	$(GO) test ./internal/handlers -run '^$$' -fuzz FuzzUpload -fuzztime $(FUZZTIME)
	$(GO) test ./internal/modes -run '^$$' -fuzz FuzzCited -fuzztime $(FUZZTIME)
	$(GO) test ./internal/eventstore -run '^$$' -fuzz FuzzTraceHeaders -fuzztime $(FUZZTIME)
	$(GO) test ./internal/eventstore -run '^$$' -fuzz FuzzScanAck -fuzztime $(FUZZTIME)
	$(GO) test ./internal/queries -run '^$$' -fuzz '^FuzzParseListParams$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/chat -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/events -run '^$$' -fuzz '^FuzzDecodeData$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/events -run '^$$' -fuzz '^FuzzEnvelopeEncode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/events -run '^$$' -fuzz '^FuzzDecodeSnapshot$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/projections -run '^$$' -fuzz '^FuzzEncodeIsMarshal$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/egress -run '^$$' -fuzz '^FuzzParseAllow$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/providers -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/providers -run '^$$' -fuzz '^FuzzContextRefusal$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/byom -run '^$$' -fuzz '^FuzzParseKeys$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/byom -run '^$$' -fuzz '^FuzzConnectRequest$$' -fuzztime $(FUZZTIME)
	$(GO) test ./client -run '^$$' -fuzz '^FuzzSSEReader$$' -parallel 1 -fuzztime $(FUZZTIME)
	for f in FuzzParseSearXNG FuzzParseBrave FuzzParseTavily FuzzPassages; do \
		$(GO) test ./internal/search -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; done
	for f in FuzzFrontMatter FuzzExtractHTML FuzzExtractMarkdown FuzzExtractPDF FuzzExtractDOCX FuzzExtractDOC; do \
		$(GO) test ./internal/extract -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; done

clean:
	rm -rf bin data crosscheck
