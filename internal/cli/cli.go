// Package cli is the client side of the crosscheck command: ask, watch,
// status, list, cancel, estimate and models, each a call of the Go client
// (package client) against the service at CROSSCHECK_URL with the API key
// in CROSSCHECK_KEY. A key is never taken from the command line, where
// other users of the machine could read it.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/term"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/client"
)

// Environment variables the commands read.
const (
	EnvURL = "CROSSCHECK_URL"
	EnvKey = "CROSSCHECK_KEY"
)

// Commands are the names Run answers to.
var Commands = []string{"ask", "watch", "status", "list", "cancel", "estimate", "models"}

// IsCommand reports whether name is one of Commands.
func IsCommand(name string) bool {
	for _, c := range Commands {
		if c == name {
			return true
		}
	}
	return false
}

// Usage describes the client commands, for the binary's usage text.
const Usage = `  crosscheck ask [--mode unify|justify|verify] [--model provider=model_id]...
                 [--custom byom_id]... [--file path]... [--json] "prompt"
                       submit a query, show its progress, print its result
  crosscheck watch <id>     follow a query to its end and print its result
  crosscheck status <id>    print a query as it is now
  crosscheck list [--status s] [--mode m] [--limit n] [--after cursor] [--all]
                       list your queries, newest first
  crosscheck cancel <id>    stop a running query
  crosscheck estimate [ask's flags] "prompt"   price a query without running it
  crosscheck models         list the models a query may select
  (the client commands read CROSSCHECK_URL, default ` + client.DefaultURL + `,
   and the API key from CROSSCHECK_KEY; --json prints the raw API answer)
`

// Exit codes.
const (
	exitOK       = 0
	exitFailed   = 1 // the service refused, or the query failed
	exitUsage    = 2
	exitDetached = 130 // interrupted: the query goes on
)

// IO is where a command reads its settings and writes its output.
type IO struct {
	Stdout, Stderr io.Writer
	// Getenv reads a setting; nil is os.Getenv.
	Getenv func(string) string
	// Terminal says whether Stdout is a terminal; nil asks the file
	// descriptor of Stdout when it is an *os.File.
	Terminal func() bool
}

func (o IO) getenv(k string) string {
	if o.Getenv == nil {
		return os.Getenv(k)
	}
	return o.Getenv(k)
}

func (o IO) terminal() bool {
	if o.Terminal != nil {
		return o.Terminal()
	}
	f, ok := o.Stdout.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Run runs the client command args[0] with the arguments after it and
// returns the process's exit code: 0 on success, 1 when the service
// refused or the query failed, 2 on a usage error, 130 when ctx ended
// (Ctrl-C) while a query was followed: the query goes on, and the message
// says how to watch or cancel it.
func Run(ctx context.Context, args []string, o IO) int {
	if len(args) == 0 || !IsCommand(args[0]) {
		fmt.Fprint(o.Stderr, "usage:\n"+Usage)
		return exitUsage
	}
	r := &runner{IO: o, name: args[0]}
	err := r.run(ctx, args[0], args[1:])
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(o.Stderr, "crosscheck %s: %s\n", args[0], ue.msg)
		return exitUsage
	case errors.Is(err, errDetached):
		return exitDetached
	case errors.Is(err, errQueryFailed):
		return exitFailed
	default:
		fmt.Fprintf(o.Stderr, "crosscheck %s: %s\n", args[0], describe(err))
		return exitFailed
	}
}

// describe says what went wrong and, for the common codes, what to do.
func describe(err error) string {
	var e *client.Error
	if !errors.As(err, &e) {
		return err.Error()
	}
	msg := e.Error()
	switch e.Code {
	case client.CodeInvalidAPIKey, "key_revoked", "key_suspended", "key_disabled":
		msg += "\n  (check the key in " + EnvKey + ")"
	case client.CodeInsufficientCredits, client.CodeMonthlyCapExceeded:
		msg += "\n  (see the price first with `crosscheck estimate`)"
	}
	return msg
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errDetached ends a command that stopped following a query on Ctrl-C.
var errDetached = errors.New("detached")

// errQueryFailed ends a command whose query failed, after it printed why.
var errQueryFailed = errors.New("the query failed")

type runner struct {
	IO
	name string
	c    *client.Client
	json bool
}

func (r *runner) connect() error {
	base := r.getenv(EnvURL)
	if base == "" {
		base = client.DefaultURL
	}
	key := r.getenv(EnvKey)
	if key == "" {
		return usagef("set %s to your API key (xchk_…)", EnvKey)
	}
	c, err := client.New(base, key)
	if err != nil {
		return usagef("%s: %v", EnvURL, err)
	}
	r.c = c
	return nil
}

func (r *runner) run(ctx context.Context, cmd string, args []string) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&r.json, "json", false, "print the raw API answer")
	var q queryFlags
	var list client.ListOptions
	var all bool
	switch cmd {
	case "ask", "estimate":
		q.register(fs)
	case "list":
		fs.StringVar(&list.Status, "status", "", "only queries with this status")
		fs.StringVar(&list.Mode, "mode", "", "only queries of this mode")
		fs.IntVar(&list.Limit, "limit", 20, "queries per page (1 to 100)")
		fs.StringVar(&list.After, "after", "", "the cursor of the next page, as a page ends")
		fs.BoolVar(&all, "all", false, "every page")
	}
	pos, err := parse(fs, args)
	if err != nil {
		return usagef("%v", err)
	}
	if err := r.connect(); err != nil {
		return err
	}
	switch cmd {
	case "ask", "estimate":
		if len(pos) == 0 {
			return usagef(`give the prompt: crosscheck %s "your question"`, cmd)
		}
		req, err := q.request(ctx, r.c, strings.Join(pos, " "))
		if err != nil {
			return err
		}
		if cmd == "estimate" {
			return r.estimate(ctx, req)
		}
		return r.ask(ctx, req)
	case "models":
		if len(pos) != 0 {
			return usagef("models takes no arguments")
		}
		return r.models(ctx)
	case "list":
		if len(pos) != 0 {
			return usagef("list takes no arguments; filter with --status and --mode")
		}
		if list.Limit < 1 || list.Limit > 100 {
			return usagef("--limit is 1 to 100")
		}
		return r.list(ctx, list, all)
	}
	if len(pos) != 1 {
		return usagef("give one query id: crosscheck %s <id>", cmd)
	}
	switch cmd {
	case "watch":
		return r.follow(ctx, pos[0])
	case "status":
		qr, err := r.c.Get(ctx, pos[0])
		if err != nil {
			return err
		}
		return r.printQuery(qr, false)
	default: // cancel
		qr, err := r.c.Cancel(ctx, pos[0])
		if err != nil {
			return err
		}
		if r.json {
			return r.printJSON(qr)
		}
		fmt.Fprintf(r.Stdout, "cancelling %s (it was %s); it ends failed with the code %s.\n  follow it: crosscheck watch %s\n", qr.RequestID, qr.Status, client.CodeCancelled, qr.RequestID)
		return nil
	}
}

// parse parses flags anywhere among the arguments (after the prompt too)
// and returns the positional ones; what follows "--" is positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return append(pos, tail...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func (r *runner) printJSON(v any) error {
	enc := json.NewEncoder(r.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// queryFlags are the flags that make a query request.
type queryFlags struct {
	mode   string
	models multi
	custom multi
	files  multi
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func (q *queryFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&q.mode, "mode", "unify", "unify, justify or verify")
	fs.Var(&q.models, "model", "provider=model_id (repeatable); provider=none leaves the provider out")
	fs.Var(&q.custom, "custom", "a custom model's id, byom_… (repeatable)")
	fs.Var(&q.files, "file", "a file to attach (repeatable)")
}

// request builds the query request, uploading the files first.
func (q *queryFlags) request(ctx context.Context, c *client.Client, prompt string) (apiv1.QueryRequest, error) {
	req := apiv1.QueryRequest{Mode: q.mode, Prompt: prompt, CustomModels: q.custom}
	for _, m := range q.models {
		provider, id, ok := strings.Cut(m, "=")
		if !ok || provider == "" || id == "" {
			return req, usagef("--model %q: write provider=model_id, or provider=none", m)
		}
		if req.Models == nil {
			req.Models = map[string]*string{}
		}
		if id == "none" {
			req.Models[provider] = nil
		} else {
			req.Models[provider] = &id
		}
	}
	for _, path := range q.files {
		f, err := os.Open(path)
		if err != nil {
			return req, usagef("--file: %v", err)
		}
		up, err := c.Upload(ctx, filepath.Base(path), f)
		f.Close()
		if err != nil {
			return req, fmt.Errorf("upload %s: %w", path, err)
		}
		req.Files = append(req.Files, up.FileID)
	}
	return req, nil
}
