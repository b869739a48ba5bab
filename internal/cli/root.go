package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/crosscheck/crosscheck/client"
)

// The groups of the root command's list: the service's commands, added by
// the binary, and the client commands of this package.
const (
	GroupService = "service"
	GroupClient  = "client"
)

// ExitCode is the error a command returns to end the process with that
// status once it has said why (or had nothing to say). Any other error of
// a command is a usage error: Execute prints it with the command's usage
// line and exits 2.
type ExitCode int

func (c ExitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// NewRoot returns the crosscheck command with the client commands (ask,
// watch, status, list, cancel, estimate, models) in it; the binary adds the
// service's commands (serve, api, worker, …) to it. The root has no flag of
// its own but -h and --version; every command has its own -h, which lists
// its flags and runs nothing; an unknown flag or an argument a command does
// not take is a usage error (exit 2).
func NewRoot(o IO) *cobra.Command {
	root := &cobra.Command{
		Use:   "crosscheck",
		Short: "multi-model verification service",
		Long: `crosscheck — multi-model verification service

The service's commands read their settings from CROSSCHECK_* environment
variables (each command's -h lists those it reads, with their defaults; see
README.md, "Settings"). The client commands talk to a running service at
CROSSCHECK_URL (default ` + client.DefaultURL + `) with the API key in CROSSCHECK_KEY.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
			return ExitCode(exitUsage)
		},
	}
	root.AddGroup(&cobra.Group{ID: GroupService, Title: "Service commands:"}, &cobra.Group{ID: GroupClient, Title: "Client commands, against a running service:"})
	root.SetHelpCommandGroupID(GroupService)
	root.SetCompletionCommandGroupID(GroupService)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	for _, c := range clientCommands(o) {
		c.GroupID = GroupClient
		root.AddCommand(c)
	}
	// crosscheck completion bash|zsh|fish|powershell: cobra's, but a shell
	// it does not know is a usage error, not its help. Its scripts go to
	// the output the root has when it is made.
	root.SetOut(o.Stdout)
	root.SetErr(o.Stderr)
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Args = cobra.NoArgs
			c.RunE = func(*cobra.Command, []string) error {
				return usagef("give the shell: crosscheck completion bash|zsh|fish|powershell")
			}
		}
	}
	return root
}

// Execute runs the command line args on root and returns the process's exit
// status: 0, the ExitCode a command returned, or 2 after a usage error,
// which it prints on o.Stderr with the command's usage line.
func Execute(ctx context.Context, root *cobra.Command, args []string, o IO) int {
	root.SetArgs(args)
	root.SetOut(o.Stdout)
	root.SetErr(o.Stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var code ExitCode
	if errors.As(err, &code) {
		return int(code)
	}
	if cmd == nil {
		cmd = root
	}
	fmt.Fprintf(o.Stderr, "%s: %s\nusage: %s\nRun '%s -h' for help.\n", cmd.CommandPath(), strings.TrimSuffix(err.Error(), "\n"), cmd.UseLine(), cmd.CommandPath())
	return exitUsage
}

// Run runs the client command args[0] with the arguments after it and
// returns the process's exit code: 0 on success, 1 when the service
// refused or the query failed, 2 on a usage error, 130 when ctx ended
// (Ctrl-C) while a query was followed: the query goes on, and the message
// says how to watch or cancel it.
func Run(ctx context.Context, args []string, o IO) int {
	return Execute(ctx, NewRoot(o), args, o)
}

// clientCommands are the client commands, each a call of the Go client.
func clientCommands(o IO) []*cobra.Command {
	env := "\n\nReads CROSSCHECK_URL (default " + client.DefaultURL + ") and the API key from\nCROSSCHECK_KEY, never from the command line."
	var q queryFlags
	var list client.ListOptions
	var all bool
	newCmd := func(use, short, long string, args cobra.PositionalArgs) *cobra.Command {
		name, _, _ := strings.Cut(use, " ")
		c := &cobra.Command{Use: use, Short: short, Long: long + env, Args: args}
		c.RunE = func(c *cobra.Command, pos []string) error {
			r := &runner{IO: o, name: name}
			r.json, _ = c.Flags().GetBool("json")
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return r.exit(r.run(ctx, name, pos, q, list, all))
		}
		c.Flags().Bool("json", false, "print the raw API answer")
		return c
	}
	oneID := func(cmd string) cobra.PositionalArgs {
		return func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("give one query id: crosscheck %s <id>", cmd)
			}
			return nil
		}
	}
	ask := newCmd(`ask [flags] "prompt"`, "submit a query, show its progress, print its result",
		"Submit a query, follow its stages (a progress bar on a terminal, a line per\nstage on standard error otherwise) and print its result. Ctrl-C detaches:\nthe query goes on (exit status 130).", cobra.ArbitraryArgs)
	estimate := newCmd(`estimate [flags] "prompt"`, "price a query without running it",
		"Price a query without running it: the credits it would reserve, per model\nand role.", cobra.ArbitraryArgs)
	for _, c := range []*cobra.Command{ask, estimate} {
		q.register(c)
	}
	ls := newCmd("list [flags]", "list your queries, newest first",
		"List your queries, newest first, a page at a time; a page ends with the\ncommand that lists the next one.", func(_ *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usagef("list takes no arguments; filter with --status and --mode")
			}
			return nil
		})
	ls.Flags().StringVar(&list.Status, "status", "", "only queries with this status (running, completed, failed)")
	ls.Flags().StringVar(&list.Mode, "mode", "", "only queries of this mode (unify, justify, verify)")
	ls.Flags().IntVar(&list.Limit, "limit", 20, "queries per page (1 to 100)")
	ls.Flags().StringVar(&list.After, "after", "", "the cursor of the next page, as a page ends")
	ls.Flags().BoolVar(&all, "all", false, "every page")
	_ = ls.RegisterFlagCompletionFunc("status", cobra.FixedCompletions([]string{"running", "completed", "failed"}, cobra.ShellCompDirectiveNoFileComp))
	_ = ls.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions(modes, cobra.ShellCompDirectiveNoFileComp))
	return []*cobra.Command{
		ask,
		newCmd("watch <id>", "follow a query to its end and print its result", "Follow a query to its end and print its result.", oneID("watch")),
		newCmd("status <id>", "print a query as it is now", "Print a query as it is now.", oneID("status")),
		ls,
		newCmd("cancel <id>", "stop a running query", "Stop a running query: it ends failed with the code cancelled.", oneID("cancel")),
		estimate,
		newCmd("models", "list the models a query may select", "List the models a query may select, per provider, with the default of each.", func(_ *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usagef("models takes no arguments")
			}
			return nil
		}),
	}
}

// modes are the values of --mode.
var modes = []string{"unify", "justify", "verify"}

// exit turns what a client command returned into its exit status, after
// saying why it failed.
func (r *runner) exit(err error) error {
	var ue usageError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ue):
		return ue
	case errors.Is(err, errDetached):
		return ExitCode(exitDetached)
	case errors.Is(err, errQueryFailed):
		return ExitCode(exitFailed)
	default:
		fmt.Fprintf(r.Stderr, "crosscheck %s: %s\n", r.name, describe(err, r.baseURL()))
		return ExitCode(exitFailed)
	}
}
