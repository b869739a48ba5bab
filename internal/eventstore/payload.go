package eventstore

import (
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// MinMaxPayload is the max_payload, in bytes, the service needs of a NATS
// server: the embedded server's, and what deploy/nats sets. Below it, a large
// event (a query's result with long model answers) can be refused by the
// server, failing that query.
const MinMaxPayload = 8 << 20

// CheckMaxPayload reports whether the server nc is connected to accepts
// messages of MinMaxPayload bytes, and logs a warning naming both sizes
// when it does not. It does not stop the start: smaller messages still
// work.
func CheckMaxPayload(nc *nats.Conn, log zerolog.Logger) bool {
	got := nc.MaxPayload()
	if got >= MinMaxPayload {
		return true
	}
	log.Warn().Int64("max_payload", got).Int64("needed", MinMaxPayload).
		Msg("the NATS server's max_payload is below what crosscheck needs: large events (long results) will be refused; set max_payload: 8MB in its configuration")
	return false
}
