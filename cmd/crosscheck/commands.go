package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/crosscheck/crosscheck/internal/app"
	"github.com/crosscheck/crosscheck/internal/bench"
	"github.com/crosscheck/crosscheck/internal/cli"
	"github.com/crosscheck/crosscheck/internal/config"
)

// Version is set at build time (make build: -ldflags "-X main.Version=…");
// unset, version() reads the build's VCS stamp.
var Version = ""

// version returns Version, or the commit and time the binary was built from
// (with "-dirty" when it had uncommitted changes), or "dev".
func version() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	var rev, at, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	switch {
	case rev != "":
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if at != "" {
			return rev + dirty + " (" + at + ")"
		}
		return rev + dirty
	case info.Main.Version != "" && info.Main.Version != "(devel)":
		return info.Main.Version
	}
	return "dev"
}

// service is what the service's commands do once their command line is
// parsed; tests replace it to see that -h runs none of it.
type service interface {
	// serve runs a process of role until SIGINT or SIGTERM.
	serve(role string) error
	audit(ctx context.Context, out io.Writer) (ok bool, err error)
	// events runs `crosscheck events <args>` and returns its exit status.
	events(ctx context.Context, args []string, out, errOut io.Writer) int
	rotateKeys(ctx context.Context, out io.Writer) error
	bench() error
}

type realService struct{}

var runService service = realService{}

func (realService) serve(role string) error { return app.Serve(role, version()) }

func (realService) audit(ctx context.Context, out io.Writer) (bool, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return false, err
	}
	return app.Audit(ctx, cfg, out)
}

func (realService) events(ctx context.Context, args []string, out, errOut io.Writer) int {
	cfg, err := config.FromEnv()
	if err != nil {
		fmt.Fprintln(errOut, "crosscheck events:", err)
		return 2
	}
	return app.Events(ctx, cfg, args, out, errOut)
}

func (realService) rotateKeys(ctx context.Context, out io.Writer) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	return app.RotateKeys(ctx, cfg, out)
}

func (realService) bench() error { return bench.Command() }

// settings is the help's list of the settings a command reads.
func settings(storeOnly bool) string {
	return "\n\nSettings (environment variables) [default]:\n" + config.SettingsHelp(storeOnly)
}

// newRoot returns the crosscheck command: the service's commands, which do
// what s does, and the client commands of package cli. It is the one list
// of commands; the usage text, the help and shell completion come from it.
func newRoot(o cli.IO, s service) *cobra.Command {
	root := cli.NewRoot(o)
	root.Version = version()
	root.SetVersionTemplate("{{.Version}}\n")
	role := func(name, short, long string) *cobra.Command {
		return &cobra.Command{
			Use: name, Short: short, Long: long + settings(false), Args: cobra.NoArgs, GroupID: cli.GroupService,
			RunE: func(c *cobra.Command, _ []string) error {
				if err := s.serve(name); err != nil {
					fmt.Fprintln(c.ErrOrStderr(), "crosscheck:", err)
					return cli.ExitCode(1)
				}
				return nil
			},
		}
	}
	keys := &cobra.Command{
		Use: "keys", Short: "manage the keys that seal BYOM provider keys", Args: cobra.NoArgs, GroupID: cli.GroupService,
		RunE: func(c *cobra.Command, _ []string) error {
			return fmt.Errorf("give a subcommand: crosscheck keys rotate")
		},
	}
	keys.AddCommand(&cobra.Command{
		Use: "rotate", Short: "seal every BYOM provider key under a new key-encryption key", Args: cobra.NoArgs,
		Long: "Seal every BYOM provider key under the first key of CROSSCHECK_MASTER_KEY (or a new\nkey in the data dir's master-keys), so that older keys can be retired." + settings(true) +
			"  CROSSCHECK_MASTER_KEY  key-encryption keys, the first the current one [unset: data dir's master-keys]\n",
		RunE: func(c *cobra.Command, _ []string) error {
			if err := s.rotateKeys(c.Context(), c.OutOrStdout()); err != nil {
				fmt.Fprintln(c.ErrOrStderr(), "crosscheck keys rotate:", err)
				return cli.ExitCode(1)
			}
			return nil
		},
	})
	root.AddCommand(
		role(app.RoleServe, "run the API, workers and projectors in one process",
			"Run the public and admin APIs, the workers and the projectors in one process,\non an embedded NATS JetStream in CROSSCHECK_DATA_DIR unless CROSSCHECK_NATS_URL\nis set. Stops on SIGINT or SIGTERM."),
		role(app.RoleAPI, "run the public and admin APIs and the projectors on CROSSCHECK_NATS_URL",
			"Run the public and admin APIs and the projectors on CROSSCHECK_NATS_URL, beside\nother api and worker processes. Needs CROSSCHECK_NATS_URL and CROSSCHECK_ADMIN_TOKEN."),
		role(app.RoleWorker, "run the mode pipelines on CROSSCHECK_NATS_URL",
			"Run the mode pipelines on CROSSCHECK_NATS_URL: workers share the job queue."),
		&cobra.Command{
			Use: "audit", Short: "replay the ledger and check it (exit 1 on any difference)", Args: cobra.NoArgs, GroupID: cli.GroupService,
			Long: "Replay the ledger and check every balance, reservation and settlement against\nthe queries. Exit status 0: it holds; 1: a difference (printed); 2: the audit\ncould not run. Reads CROSSCHECK_NATS_URL, or the data dir of a stopped serve." + settings(true),
			RunE: func(c *cobra.Command, _ []string) error {
				ok, err := s.audit(c.Context(), c.OutOrStdout())
				if err != nil {
					fmt.Fprintln(c.ErrOrStderr(), "crosscheck audit:", err)
					return cli.ExitCode(2)
				}
				if !ok {
					return cli.ExitCode(1)
				}
				return nil
			},
		},
		&cobra.Command{
			Use: "events export|tail [flags]", Short: "export or tail the event streams as NDJSON", GroupID: cli.GroupService,
			Long: "Write the stored events as NDJSON (export), or write them and follow new ones\n(tail). `crosscheck events export -h` lists the flags. Reads CROSSCHECK_NATS_URL,\nor the running serve of CROSSCHECK_DATA_DIR through the port it listens on\n(CROSSCHECK_NATS_LISTEN), or the data dir of a stopped one." + settings(true),
			// export.Run parses the flags and prints their help.
			DisableFlagParsing: true,
			RunE: func(c *cobra.Command, args []string) error {
				ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGINT, syscall.SIGTERM)
				defer stop()
				if code := s.events(ctx, args, c.OutOrStdout(), c.ErrOrStderr()); code != 0 {
					return cli.ExitCode(code)
				}
				return nil
			},
		},
		keys,
		&cobra.Command{
			Use: "bench", Short: "measure the service beside the raw JetStream limit", Args: cobra.NoArgs, GroupID: cli.GroupService,
			Long: "Measure the service beside the raw JetStream limit under both fsync policies,\nprint a table and write the JSON results.\n\nSettings (environment variables) [default]:\n" +
				"  BENCH_OUT    the JSON results [bench/results.json]\n  BENCH_PHASE  the length of each phase [8s]\n",
			RunE: func(c *cobra.Command, _ []string) error {
				if err := s.bench(); err != nil {
					fmt.Fprintln(c.ErrOrStderr(), "crosscheck bench:", err)
					return cli.ExitCode(1)
				}
				return nil
			},
		},
		&cobra.Command{
			Use: "version", Short: "print the version", Args: cobra.NoArgs, GroupID: cli.GroupService,
			Run: func(c *cobra.Command, _ []string) { fmt.Fprintln(c.OutOrStdout(), version()) },
		},
	)
	return root
}
