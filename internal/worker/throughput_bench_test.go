package worker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/modes"
)

type instantMode struct{}

func (instantMode) Run(context.Context, *events.Query, modes.Emit) (events.Event, error) {
	return events.QueryCompleted{}, nil
}

// BenchmarkWorkerJobs measures one worker taking submitted jobs off the
// queue and ending them (a mode that does nothing): the pull loop, the
// per-job bookkeeping and its two appends.
func BenchmarkWorkerJobs(b *testing.B) {
	store := storetest.Open(b)
	var done atomic.Int64
	sub, err := store.Conn().Subscribe("ev.query.*.completed", func(*nats.Msg) { done.Add(1) })
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	w := &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Modes: map[string]Mode{"unify": instantMode{}},
		AckWait: 10 * time.Second, MaxJobs: 20000, Grace: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = w.Run(ctx) }()
	defer func() { cancel(); <-stopped }()
	b.ResetTimer()
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 32 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				id := fmt.Sprintf("req_BENCH%021d", i)
				env, _ := events.Wrap(events.AggregateQuery, id, events.QuerySubmitted{RequestID: id, AccountID: "acct_x", Mode: "unify", Prompt: "p",
					Models: []events.ModelRef{{Provider: "provider_a", ModelID: "m"}}}, time.Now())
				if _, err := store.Append(context.Background(), env, nil); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	storetest.WaitFor(b, 2*time.Minute, fmt.Sprintf("%d jobs to end", b.N), func() bool { return done.Load() >= int64(b.N) })
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
