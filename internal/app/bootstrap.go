package app

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/crosscheck/crosscheck/internal/events"
)

// adminTokenFile holds the generated admin token inside the data dir.
const adminTokenFile = "admin-token"

// loadAdminToken uses CROSSCHECK_ADMIN_TOKEN, or the token kept in the data
// dir, or generates one and keeps it there (mode 0600).
func (m *Main) loadAdminToken() error {
	if m.Config.AdminToken != "" || m.role() == RoleWorker {
		return nil
	}
	if m.role() == RoleAPI {
		return errors.New("crosscheck api needs CROSSCHECK_ADMIN_TOKEN: every API process must accept the same admin token")
	}
	path := filepath.Join(m.Config.DataDir, adminTokenFile)
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		m.Config.AdminToken = strings.TrimSpace(string(b))
		return nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("admin token: %w", err)
	}
	if err := os.MkdirAll(m.Config.DataDir, 0o700); err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	token := "xadm_" + rand.Text()
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	m.Config.AdminToken = token
	return nil
}

// Bootstrap creates, on first start, a development account with one API key
// and prints the key once (with Config.PrintFirstKey off it creates no key
// and prints how to make one); on later starts it says how to make another.
func (m *Main) Bootstrap(ctx context.Context) error {
	state, err := m.Store.Accounts.State(ctx)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	tokenHint := "$CROSSCHECK_ADMIN_TOKEN"
	if os.Getenv("CROSSCHECK_ADMIN_TOKEN") == "" {
		tokenHint = "$(cat " + filepath.Join(m.Config.DataDir, adminTokenFile) + ")"
	}
	w := m.Out
	fmt.Fprintf(w, "\ncrosscheck %s\n  public API  %s\n  admin API   %s\n", cmp.Or(m.Version, "dev"), m.URL(), m.AdminURL())
	sim := 0
	for _, p := range m.Catalog.Providers {
		if p.Simulated() {
			sim++
		}
	}
	if sim > 0 {
		fmt.Fprintf(w, "  models      %d of %d providers run on the SIMULATED backend (no credentials configured)\n", sim, len(m.Catalog.Providers))
	}
	if state.Msgs > 0 {
		account := "<account_id>"
		first, err := m.Store.Accounts.Next(ctx, events.Subject(events.AggregateAccount, "*", events.AccountCreated{}.EventName()), 1)
		if err == nil {
			account = events.AggregateID(first.Subject)
		}
		fmt.Fprintf(w, "\nData dir %s already holds accounts; existing keys keep working.\n", m.Config.DataDir)
		fmt.Fprintf(w, "Create another key for the first account with:\n  curl -s -X POST %s/admin/v1/accounts/%s/keys \\\n    -H \"Authorization: Bearer %s\" \\\n    -d '{\"name\": \"another key\", \"accept_aup\": true}'\n\n", m.AdminURL(), account, tokenHint)
		return nil
	}
	acc, err := m.Accounts.CreateAccount(ctx, "development", events.PlanFree)
	if err != nil {
		return fmt.Errorf("bootstrap account: %w", err)
	}
	if !m.Config.PrintFirstKey {
		// No key goes to the logs (CROSSCHECK_PRINT_FIRST_KEY=false).
		fmt.Fprintf(w, "\nFirst start: created the development account %s; no key is printed here.\n", acc.ID)
		fmt.Fprintf(w, "Create a key with:\n  curl -s -X POST %s/admin/v1/accounts/%s/keys \\\n    -H \"Authorization: Bearer %s\" \\\n    -d '{\"name\": \"first key\", \"accept_aup\": true}'\n\n", m.AdminURL(), acc.ID, tokenHint)
		return nil
	}
	key, _, err := m.Accounts.CreateKey(ctx, acc.ID, "development key", true)
	if err != nil {
		return fmt.Errorf("bootstrap key: %w", err)
	}
	fmt.Fprintf(w, "\nFirst start: created the development account %s and one API key.\n", acc.ID)
	fmt.Fprintf(w, "The key is shown this once and cannot be recovered:\n\n  export CROSSCHECK_KEY=%s\n\n", key.String())
	fmt.Fprintf(w, "The admin token is in %s (mode 0600).\n\n", filepath.Join(m.Config.DataDir, adminTokenFile))
	return nil
}
