package app

import (
	"context"
	"fmt"
	"os"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// runProjections runs the query-status and accounts projections. On the embedded server this
// process is the only one. On a shared JetStream every API process runs the
// projectors and a lease lets one at a time apply each projection.
func (m *Main) runProjections(ctx context.Context) {
	status := &projections.QueryStatus{Store: m.Store}
	runners := []*projections.Runner{
		{Name: projections.ConsumerQueryStatus, Stream: m.Store.Queries, Filters: []string{"ev.query.>"}, HandleBatch: status.HandleBatch},
		{Name: projections.ConsumerAccounts, Stream: m.Store.Accounts, Filters: []string{"ev.account.>"},
			HandleBatch: projections.Accounts(&projections.Keys{Store: m.Store}, &projections.Balances{Store: m.Store})},
	}
	host, _ := os.Hostname()
	for _, r := range runners {
		r.Log, r.Checkpoints = m.Log, m.Store.Projections
		if m.Config.NATSURL == "" {
			m.wg.Go(func() {
				if err := r.Run(ctx); err != nil {
					m.Log.Error().Err(err).Str("consumer", r.Name).Msg("projection stopped")
				}
			})
			continue
		}
		lease := &projections.Lease{KV: m.Store.Leases, Name: r.Name, TTL: eventstore.LeaseTTL, Log: m.Log,
			Holder: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), events.NewID())}
		m.wg.Go(func() { lease.Run(ctx, r.Run) })
	}
}
