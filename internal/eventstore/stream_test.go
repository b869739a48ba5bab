package eventstore_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// An ordered read asks the server for a heartbeat every second while its
// pull waits: a reader whose client stopped asking for more (see
// orderedHeartbeat) misses two and is recreated within about 2 s, not the
// 10 s of nats.go's default. The pull requests on the wire say so.
func TestOrderedPullsAskForAHeartbeatASecond(t *testing.T) {
	store := storetest.Open(t)
	pulls := make(chan *nats.Msg, 16)
	sub, err := store.Conn().ChanSubscribe("$JS.API.CONSUMER.MSG.NEXT."+eventstore.StreamQueries+".>", pulls)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	cc, err := store.Queries.Ordered(context.Background(), []string{"ev.query.>"}, 0, 64, func(eventstore.Message) {}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	select {
	case m := <-pulls:
		var req struct {
			Heartbeat time.Duration `json:"idle_heartbeat"`
		}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Fatalf("pull request %s: %v", m.Data, err)
		}
		if req.Heartbeat <= 0 || req.Heartbeat > time.Second {
			t.Errorf("the pull asks for a heartbeat every %v (%s), want one at least every second", req.Heartbeat, m.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no pull request seen")
	}
}
