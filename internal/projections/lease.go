package projections

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// Lease makes one process at a time run a projection, however many run the
// API: the holder owns a key in the leases bucket, whose entries expire
// LeaseTTL after their last write, and renews it every LeaseTTL/4. A holder
// that cannot renew for LeaseTTL/2 stops its projection, before the entry can
// expire and another process take the lease, so two holders never apply
// events at once. A process that dies loses the lease when its entry expires.
type Lease struct {
	// KV is the leases bucket; its entries must expire after LeaseTTL.
	KV *eventstore.Bucket
	// Name is the projection's name, the key of its lease.
	Name string
	// Holder names this process in the lease (host and pid, say).
	Holder string
	TTL    time.Duration
	Log    zerolog.Logger
}

// Run runs fn while this process holds the lease, again each time it takes
// the lease back, until ctx ends. fn must return when its context ends.
func (l *Lease) Run(ctx context.Context, fn func(ctx context.Context) error) {
	every := l.TTL / 4
	for ctx.Err() == nil {
		rev, err := l.KV.Create(ctx, l.Name, []byte(l.Holder))
		if err != nil {
			if !errors.Is(err, eventstore.ErrConflict) && ctx.Err() == nil {
				l.Log.Warn().Err(err).Str("projection", l.Name).Msg("lease: cannot reach the leases bucket")
			}
			sleep(ctx, every)
			continue
		}
		l.Log.Info().Str("projection", l.Name).Str("holder", l.Holder).Msg("lease taken: this process runs the projection")
		l.hold(ctx, rev, fn)
	}
}

// errLeaseLost is the cause of the end of a holder's context when another
// process took its lease: what it still holds unstored is not stored (see
// Runner), since the other process may have written newer documents.
var errLeaseLost = errors.New("the projection's lease was taken by another process")

// hold runs fn and renews the lease until fn returns, ctx ends or the lease
// is lost; then it gives the lease up.
func (l *Lease) hold(ctx context.Context, rev uint64, fn func(ctx context.Context) error) {
	held, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer holding(l.Name)()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fn(held); err != nil {
			l.Log.Error().Err(err).Str("projection", l.Name).Msg("projection stopped")
		}
	}()
	every := l.TTL / 4
	renewed := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			l.release(rev)
			return
		case <-t.C:
			next, err := l.KV.Update(held, l.Name, []byte(l.Holder), rev)
			switch {
			case err == nil:
				rev, renewed = next, time.Now()
			case errors.Is(err, eventstore.ErrConflict), errors.Is(err, eventstore.ErrNotFound):
				l.Log.Warn().Str("projection", l.Name).Msg("lease lost to another process: the projection stops here")
				stop(errLeaseLost)
				<-done
				return
			case time.Since(renewed) >= l.TTL/2:
				l.Log.Warn().Err(err).Str("projection", l.Name).Msg("lease not renewed in time: the projection stops here")
				stop(nil)
				<-done
				return
			}
		}
	}
}

// release gives the lease up at once, so another process need not wait for
// it to expire.
func (l *Lease) release(rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = l.KV.Delete(ctx, l.Name, rev)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
