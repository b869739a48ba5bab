// Command crosscheck is the multi-model verification service. `crosscheck
// serve` runs the API, the workers and the projectors in one process over an
// embedded nats-server with JetStream, or over CROSSCHECK_NATS_URL; `crosscheck
// api` and `crosscheck worker` run the parts as separate processes on a
// shared NATS JetStream. The wiring is in internal/app.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/crosscheck/crosscheck/internal/app"
	"github.com/crosscheck/crosscheck/internal/bench"
	"github.com/crosscheck/crosscheck/internal/cli"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/extract"
)

var usage = `crosscheck — multi-model verification service

Usage:
  crosscheck serve     run the API, workers and projectors in one process
                       (embedded NATS JetStream unless CROSSCHECK_NATS_URL is set)
  crosscheck api       run the public and admin APIs and the projectors on
                       CROSSCHECK_NATS_URL, beside other api and worker processes
  crosscheck worker    run the mode pipelines on CROSSCHECK_NATS_URL
  crosscheck audit     replay the ledger and check it (exit 1 on any difference)
  crosscheck events    export or tail the event streams as NDJSON (crosscheck events -h)
  crosscheck keys rotate
                       seal every BYOM provider key under a new key-encryption key
  crosscheck bench     measure the service beside the raw JetStream limit
                       (writes JSON to $BENCH_OUT, default bench/results.json)
  crosscheck version   print the version

Client commands, against a running service:
` + cli.Usage + `
Settings are CROSSCHECK_* environment variables; see README.md.
`

// Version is set at build time.
var Version = "dev"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
	case extract.ChildCommand: // hidden: the isolated extraction of one file
		os.Exit(extract.ChildMain(os.Args[2:], os.Stdin, os.Stdout))
	case app.RoleServe, app.RoleAPI, app.RoleWorker:
		if err := app.Serve(os.Args[1], Version); err != nil {
			fmt.Fprintln(os.Stderr, "crosscheck:", err)
			os.Exit(1)
		}
	case "audit":
		cfg, err := config.FromEnv()
		if err == nil {
			var ok bool
			if ok, err = app.Audit(context.Background(), cfg, os.Stdout); err == nil && !ok {
				os.Exit(1)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "crosscheck audit:", err)
			os.Exit(2)
		}
	case "events":
		cfg, err := config.FromEnv()
		if err != nil {
			fmt.Fprintln(os.Stderr, "crosscheck events:", err)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		code := app.Events(ctx, cfg, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	case "keys":
		if len(os.Args) != 3 || os.Args[2] != "rotate" {
			fmt.Fprintln(os.Stderr, "usage: crosscheck keys rotate")
			os.Exit(2)
		}
		cfg, err := config.FromEnv()
		if err == nil {
			err = app.RotateKeys(context.Background(), cfg, os.Stdout)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "crosscheck keys rotate:", err)
			os.Exit(1)
		}
	case "bench":
		if err := bench.Command(); err != nil {
			fmt.Fprintln(os.Stderr, "crosscheck bench:", err)
			os.Exit(1)
		}
	case "ask", "watch", "status", "list", "cancel", "estimate", "models":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Run(ctx, os.Args[1:], cli.IO{Stdout: os.Stdout, Stderr: os.Stderr})
		stop()
		os.Exit(code)
	case "version":
		fmt.Println(Version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "crosscheck: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}
