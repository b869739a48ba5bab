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
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/client"
)

// Environment variables the commands read.
const (
	EnvURL = "CROSSCHECK_URL"
	EnvKey = "CROSSCHECK_KEY"
)

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

// describe says what went wrong and, for the common codes, what to do;
// when the service at base could not be reached, it says where it looked.
func describe(err error, base string) string {
	var e *client.Error
	if !errors.As(err, &e) {
		if unreachable(err) {
			return fmt.Sprintf("%v\n  (no service answers at %s: start it with `crosscheck serve` or `make run`, or set %s to its address)", err, base, EnvURL)
		}
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

// baseURL is the service's address: CROSSCHECK_URL or the default.
func (r *runner) baseURL() string {
	if base := r.getenv(EnvURL); base != "" {
		return base
	}
	return client.DefaultURL
}

func (r *runner) connect() error {
	base := r.baseURL()
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

func (r *runner) run(ctx context.Context, cmd string, pos []string, q queryFlags, list client.ListOptions, all bool) error {
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

// register adds the query flags to c.
func (q *queryFlags) register(c *cobra.Command) {
	fs := c.Flags()
	fs.StringVar(&q.mode, "mode", "unify", "unify, justify or verify")
	fs.StringArrayVar((*[]string)(&q.models), "model", nil, "provider=model_id (repeatable); provider=none leaves the provider out")
	fs.StringArrayVar((*[]string)(&q.custom), "custom", nil, "a custom model's id, byom_… (repeatable)")
	fs.StringArrayVar((*[]string)(&q.files), "file", nil, "a file to attach (repeatable)")
	_ = c.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions(modes, cobra.ShellCompDirectiveNoFileComp))
	_ = c.MarkFlagFilename("file")
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

// unreachable reports whether err is a failure to reach the service at
// all: no connection could be made to its address.
func unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial"
}
