package app

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/byom"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/egress"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/modes"
	"github.com/crosscheck/crosscheck/internal/pricing"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/registry"
	"github.com/crosscheck/crosscheck/internal/queries"
	"github.com/crosscheck/crosscheck/internal/worker"
)

// byomPolicy is the egress allow list: CROSSCHECK_BYOM_ALLOW when set (even
// empty), else loopback on the embedded server (a model runner on the same
// machine) on the ports local runners use (egress.LocalRunnerPorts) but the
// process's own (own: its listen addresses), and nothing on a shared NATS.
func byomPolicy(allow string, set, embedded bool, own ...string) (*egress.Policy, error) {
	if !set && embedded {
		var ports []uint16
		for _, p := range egress.LocalRunnerPorts {
			if !slices.ContainsFunc(own, func(addr string) bool { _, port, _ := net.SplitHostPort(addr); return port == strconv.Itoa(int(p)) }) {
				ports = append(ports, p)
			}
		}
		allow = egress.LoopbackOn(ports...)
	}
	p, err := egress.ParseAllow(allow)
	if err != nil {
		return nil, fmt.Errorf("CROSSCHECK_BYOM_ALLOW: %w", err)
	}
	return p, nil
}

// openBYOM builds the customer-owned models' service: the keyring
// (CROSSCHECK_MASTER_KEY, or the data dir's key file, generated on the
// first start of an embedded serve), the egress guard and the service.
func (m *Main) openBYOM() error {
	embedded := m.Config.NATSURL == ""
	ring, err := byom.LoadKeyring(m.Config.MasterKey, m.Config.DataDir, embedded && m.role() == RoleServe)
	if err != nil {
		return err
	}
	policy, err := byomPolicy(m.Config.BYOMAllow, m.Config.BYOMAllowSet, embedded, m.Config.HTTPAddr, m.Config.AdminAddr)
	if err != nil {
		return err
	}
	m.BYOM = &byom.Service{
		Accounts: m.Accounts, Keyring: ring, Guard: &egress.Guard{Policy: policy}, Log: m.Log,
		MaxCalls: m.Config.BYOMMaxCalls, MaxCallsPerAccount: m.Config.BYOMMaxCallsPerAccount,
		// Counted and traced under the provider key of the customers'
		// models, so that their calls are customer-billed and no
		// customer's model name becomes a label value; a host that reports
		// no usage is counted with the default tokenizer (no catalog row
		// names one). Its prompts fit the context window its capabilities
		// declare (config.DefaultContextWindow when they declare none),
		// with at most half of it, and config.DefaultMaxOutputTokens, of
		// output.
		Calls: func(p providers.Provider, caps events.Capabilities) providers.Provider {
			set := providers.Set{providers.CustomProvider: p}
			window := cmp.Or(caps.ContextWindow, config.DefaultContextWindow)
			limits := func(string, string) (int, int) { return window, min(config.DefaultMaxOutputTokens, window/2) }
			return registry.Calls(set, m.RetryDelays, m.Config.ModelTimeout, (&pricing.Estimator{}).Tokens, limits, m.Log)[providers.CustomProvider]
		},
	}
	return nil
}

// customModels adapts the BYOM service to query admission.
type customModels struct{ *byom.Service }

// Resolve returns the models of ids for a query of the account.
func (c customModels) Resolve(ctx context.Context, accountID string, ids []string) ([]queries.CustomModel, error) {
	found, err := c.Service.Resolve(ctx, accountID, ids)
	if err != nil {
		return nil, err
	}
	out := make([]queries.CustomModel, len(found))
	for i, f := range found {
		out[i] = queries.CustomModel{Ref: f.Ref, Reads: f.Reads}
	}
	return out, nil
}

// accountScoped runs a mode with the query's account in the context, where
// the BYOM service finds the models the query selected.
type accountScoped struct{ worker.Mode }

// Run runs the mode.
func (a accountScoped) Run(ctx context.Context, q *events.Query, emit modes.Emit) (events.Event, error) {
	if q.Submitted != nil {
		ctx = byom.WithAccount(ctx, q.Submitted.AccountID)
	}
	return a.Mode.Run(ctx, q, emit)
}

// RotateKeys runs `crosscheck keys rotate` against the store of cfg: a new
// current key-encryption key (in the data dir's key file; with
// CROSSCHECK_MASTER_KEY, its first key), then every customer-owned model's
// secret sealed under it. It prints the outcome to w. The embedded store
// is held by a running `crosscheck serve`: rotate through its admin API
// then (POST /admin/v1/master-key/rotate).
func RotateKeys(ctx context.Context, cfg config.Config, w io.Writer) error {
	store, closeStore, err := OpenStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeStore()
	ring, err := byom.LoadKeyring(cfg.MasterKey, cfg.DataDir, false)
	if err != nil {
		return err
	}
	if ring.Current() == "" {
		return fmt.Errorf("no key-encryption key: set CROSSCHECK_MASTER_KEY, or run where the data dir holds %s", byom.MasterKeyFile)
	}
	svc := &byom.Service{Accounts: &accounts.Service{Store: store, Now: time.Now}, Keyring: ring}
	out, err := svc.Rotate(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "key-encryption key %s is current; %d secrets sealed again under it\n", out.KeyID, out.Rotated)
	for _, id := range out.Failed {
		fmt.Fprintf(w, "could not open the secret of %s: it is sealed under a key this process does not have\n", id)
	}
	if len(out.Failed) > 0 {
		return fmt.Errorf("%d secrets were left under their old key", len(out.Failed))
	}
	return nil
}
