// Command crosscheck is the multi-model verification service. `crosscheck
// serve` runs the API, the workers and the projectors in one process over an
// embedded nats-server with JetStream, or over CROSSCHECK_NATS_URL; `crosscheck
// api` and `crosscheck worker` run the parts as separate processes on a
// shared NATS JetStream. The wiring is in internal/app; the command line (one
// list of commands, each with its own -h) is built on cobra in newRoot.
package main

import (
	"context"
	"os"

	"github.com/crosscheck/crosscheck/internal/cli"
	"github.com/crosscheck/crosscheck/internal/extract"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == extract.ChildCommand { // hidden: the isolated extraction of one file
		os.Exit(extract.ChildMain(os.Args[2:], os.Stdin, os.Stdout))
	}
	o := cli.IO{Stdout: os.Stdout, Stderr: os.Stderr}
	os.Exit(cli.Execute(context.Background(), newRoot(o, runService), os.Args[1:], o))
}
