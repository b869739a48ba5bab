package embedded

import (
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// serverLog writes the embedded server's log through zerolog: its warnings
// and errors at those levels, its notices at debug (its start-up banner
// alone is a dozen lines). Its debug and trace output is never turned on.
type serverLog struct{ log zerolog.Logger }

var _ server.Logger = serverLog{}

func (l serverLog) Noticef(format string, v ...any) { l.log.Debug().Msg(fmt.Sprintf(format, v...)) }
func (l serverLog) Warnf(format string, v ...any)   { l.log.Warn().Msg(fmt.Sprintf(format, v...)) }
func (l serverLog) Errorf(format string, v ...any)  { l.log.Error().Msg(fmt.Sprintf(format, v...)) }

// Fatalf logs at error level: the server calls it where it would exit, and
// an embedded server must not end its process.
func (l serverLog) Fatalf(format string, v ...any) {
	l.log.Error().Bool("fatal", true).Msg(fmt.Sprintf(format, v...))
}

func (l serverLog) Debugf(format string, v ...any) {}
func (l serverLog) Tracef(format string, v ...any) {}
