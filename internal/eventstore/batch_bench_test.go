package eventstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/crosscheck/crosscheck/internal/embedded"
)

// BenchmarkStepAppends weighs two ways of appending the events of one step
// of a query that do not depend on each other (three, as the model answers
// that arrive together), each step conditional on the query's last
// sequence, under both fsync policies, with 128 queries appending at once:
// one conditional append after another (each waits for the previous one's
// acknowledgement, as the worker appends today), and one JetStream atomic
// batch whose first message carries the condition. One op is one step; the
// process's CPU time per step is reported beside it.
func BenchmarkStepAppends(b *testing.B) {
	const perStep = 3
	for _, always := range []bool{false, true} {
		policy := "interval"
		if always {
			policy = "always"
		}
		srv, err := embedded.Start(embedded.Options{DataDir: b.TempDir(), SyncAlways: always})
		if err != nil {
			b.Fatal(err)
		}
		nc, err := srv.Connect("bench")
		if err != nil {
			b.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "STEPS", Subjects: []string{"ev.query.>"},
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, AllowAtomicPublish: true}); err != nil {
			b.Fatal(err)
		}
		data := make([]byte, 600)
		var aggregates atomic.Int64
		msg := func(agg, i int) *nats.Msg {
			m := nats.NewMsg(fmt.Sprintf("ev.query.q%d.model_answered", agg))
			m.Data = data
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("q%d-%d-%d", agg, i, time.Now().UnixNano()))
			return m
		}
		ways := map[string]func(agg int, last uint64) (uint64, error){
			"one_by_one": func(agg int, last uint64) (uint64, error) {
				for i := range perStep {
					ack, err := js.PublishMsg(ctx, msg(agg, i), jetstream.WithExpectLastSequenceForSubject(last, fmt.Sprintf("ev.query.q%d.>", agg)))
					if err != nil {
						return 0, err
					}
					last = ack.Sequence
				}
				return last, nil
			},
			"atomic_batch": func(agg int, last uint64) (uint64, error) {
				msgs := make([]*nats.Msg, perStep)
				for i := range msgs {
					msgs[i] = msg(agg, i)
				}
				msgs[0].Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
				msgs[0].Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, fmt.Sprintf("ev.query.q%d.>", agg))
				ack, err := jetstreamext.PublishMsgBatch(ctx, js, msgs, jetstreamext.BatchFlowControl{AckFirst: false})
				if err != nil {
					return 0, err
				}
				return ack.Sequence, nil
			},
		}
		for _, way := range []string{"one_by_one", "atomic_batch"} {
			b.Run(policy+"/"+way, func(b *testing.B) {
				step := ways[way]
				b.SetParallelism(64) // 128 on 2 cores
				before := cpuTime()
				b.RunParallel(func(pb *testing.PB) {
					agg := int(aggregates.Add(1))
					var last uint64
					for pb.Next() {
						var err error
						if last, err = step(agg, last); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64((cpuTime()-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
		nc.Close()
		srv.Stop()
	}
}
