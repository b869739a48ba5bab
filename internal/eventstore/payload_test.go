package eventstore

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// TestCheckMaxPayload: a server that accepts less than the service needs is
// reported with a warning at start; one that accepts enough is not.
func TestCheckMaxPayload(t *testing.T) {
	for _, c := range []struct {
		maxPayload int32
		ok         bool
	}{{1 << 20, false}, {MinMaxPayload, true}} {
		srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, MaxPayload: c.maxPayload, NoLog: true, NoSigs: true})
		if err != nil {
			t.Fatal(err)
		}
		srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats-server did not start")
		}
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		got := CheckMaxPayload(nc, zerolog.New(&logs))
		nc.Close()
		srv.Shutdown()
		if got != c.ok || strings.Contains(logs.String(), "max_payload") == c.ok {
			t.Fatalf("max_payload %d: CheckMaxPayload = %v, log %q; want %v and a warning only when false", c.maxPayload, got, logs.String(), c.ok)
		}
	}
}
