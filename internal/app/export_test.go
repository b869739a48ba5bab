package app

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"

	"github.com/crosscheck/crosscheck/internal/embedded"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/queries"
)

// decodeForTest returns the body hash the service computes for body.
func decodeForTest(h *harness, body any) (string, error) {
	raw, _ := json.Marshal(body)
	req, err := queries.Decode(raw, h.m.Catalog, map[string]bool{events.ModeUnify: true})
	if err != nil {
		return "", err
	}
	return req.Hash(), nil
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

type contextT = context.Context

// Crash stops the process abruptly, as kill -9 would as far as the data is
// concerned: nothing is acknowledged or handed back, connections just end.
func (m *Main) Crash() {
	m.closeOnce.Do(func() {
		for _, srv := range []*http.Server{m.public, m.admin} {
			if srv != nil {
				_ = srv.Close()
			}
		}
		if m.nc != nil {
			m.nc.Close()
		}
		if m.cancel != nil {
			m.cancel()
		}
		if m.nats != nil {
			m.nats.Stop()
			// A process that dies leaves its data dir marked as in use.
			_ = os.WriteFile(filepath.Join(m.Config.DataDir, embedded.RunningFile), []byte("crashed\n"), 0o600)
		}
		m.wg.Wait()
		if m.workerDone != nil {
			<-m.workerDone
		}
	})
}
