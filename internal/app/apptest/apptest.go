// Package apptest starts a whole crosscheck process for the tests and
// examples of the packages that talk to it over HTTP (the Go client, the
// CLI): an embedded JetStream in a temporary directory, the APIs on random
// loopback ports, simulated model backends, and an account with an API key.
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/app"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/extract"
)

// RunChildIfAsked makes the test binary the file extraction child when the
// file service starts it as one, and exits then; otherwise it returns. A
// TestMain whose tests upload files calls it first, as main does.
func RunChildIfAsked() { extract.RunChildIfAsked() }

// Server is a running crosscheck process and the credentials of one
// account on it.
type Server struct {
	// URL is the public API's base URL, http://127.0.0.1:<port>.
	URL string
	// Key is an API key of AccountID.
	Key       string
	AccountID string
	// Main is the process; Close stops it.
	Main *app.Main

	dir string
}

// Option changes the settings of the process before it starts.
type Option func(*config.Config)

// WithSimLatency adds d to every simulated model call, so that a query runs
// long enough to be watched or cancelled.
func WithSimLatency(d time.Duration) Option {
	return func(c *config.Config) { c.SimLatency = d }
}

// Start starts a process in a new temporary directory and creates an
// account (plan pro) with one key. It returns an error when the process
// does not start or the admin API refuses the account; the caller Closes
// the server.
func Start(opts ...Option) (*Server, error) {
	dir, err := os.MkdirTemp("", "crosscheck-apptest-")
	if err != nil {
		return nil, err
	}
	cfg := app.EphemeralConfig(dir)
	for _, o := range opts {
		o(&cfg)
	}
	m := &app.Main{Config: cfg, Log: zerolog.Nop()}
	s := &Server{Main: m, dir: dir}
	if err := m.Open(context.Background()); err != nil {
		s.Close()
		return nil, fmt.Errorf("start crosscheck: %w", err)
	}
	s.URL = m.URL()
	if s.AccountID, s.Key, err = s.NewAccount(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// NewAccount creates another account (plan pro) with one key and returns
// its id and key.
func (s *Server) NewAccount() (accountID, key string, err error) {
	var acct struct {
		AccountID string `json:"account_id"`
	}
	if err := s.admin("/admin/v1/accounts", map[string]any{"name": "apptest", "plan": "pro"}, &acct); err != nil {
		return "", "", fmt.Errorf("create account: %w", err)
	}
	var k struct {
		Key string `json:"key"`
	}
	if err := s.admin("/admin/v1/accounts/"+acct.AccountID+"/keys", map[string]any{"name": "apptest", "accept_aup": true}, &k); err != nil {
		return "", "", fmt.Errorf("create key: %w", err)
	}
	return acct.AccountID, k.Key, nil
}

func (s *Server) admin(path string, body, out any) error {
	raw, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, s.Main.AdminURL()+path, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.Main.Config.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("%s answered %d: %s", path, resp.StatusCode, b)
	}
	return json.Unmarshal(b, out)
}

// Close stops the process and removes its directory.
func (s *Server) Close() {
	s.Main.Close()
	os.RemoveAll(s.dir)
}
