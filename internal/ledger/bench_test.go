package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// BenchmarkReserveAndSettle makes one reservation and one settlement of
// five calls on an account that settled history queries before: one op is
// a query's two ledger appends, with cpu-ns/op the process's CPU per op
// (the embedded server's included).
func BenchmarkReserveAndSettle(b *testing.B) {
	for _, history := range []int{0, 10000} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			store := storetest.Open(b)
			ctx := context.Background()
			led := process(store)
			view, err := led.Accounts.CreateAccount(ctx, "bench", events.PlanEnterprise)
			if err != nil {
				b.Fatal(err)
			}
			acct := view.ID
			if _, err := led.Adjust(ctx, acct, 1_000_000*events.MicrosPerCredit, "credits"); err != nil {
				b.Fatal(err)
			}
			calls := []events.Call{call("c1", 112000), call("c2", 112000), call("c3", 112000), call("c4", 112000), call("c5", 409500)}
			settle := func() {
				id := "req_" + events.NewID()
				if err := led.Reserve(ctx, acct, id, 2*events.MicrosPerCredit, false); err != nil {
					b.Fatal(err)
				}
				if _, err := led.Settle(ctx, acct, id, calls, completed); err != nil {
					b.Fatal(err)
				}
			}
			for range history {
				settle()
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			for b.Loop() {
				settle()
			}
			// The process's CPU, the embedded server's included: on a
			// shared machine, what the wall time is not.
			b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
