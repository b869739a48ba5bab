package eventstore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/crosscheck/crosscheck/internal/config"
)

// Connect connects to urls (comma-separated, any server of a cluster) with
// auth — a credentials file, an NKey seed file, a token, TLS — reconnecting
// forever. Errors never include the token.
func Connect(urls, name string, auth config.NATSAuth) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1)}
	if auth.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(auth.CredsFile))
	}
	if auth.NKeySeedFile != "" {
		opt, err := nats.NkeyOptionFromSeed(auth.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("NATS NKey seed file: %w", err)
		}
		opts = append(opts, opt)
	}
	if auth.Token != "" {
		opts = append(opts, nats.Token(auth.Token))
	}
	if auth.TLSCA != "" {
		opts = append(opts, nats.RootCAs(auth.TLSCA))
	}
	if auth.TLSCert != "" || auth.TLSKey != "" {
		opts = append(opts, nats.ClientCert(auth.TLSCert, auth.TLSKey))
	}
	nc, err := nats.Connect(urls, opts...)
	if errors.Is(err, nats.ErrAuthorization) {
		// Refused, not unreachable: kept as such so that a caller does not
		// wait for it to pass.
		return nil, fmt.Errorf("connect to NATS at %s: %w", RedactURLs(urls, urls), nats.ErrAuthorization)
	}
	if err != nil {
		msg := err.Error()
		if auth.Token != "" {
			msg = strings.ReplaceAll(msg, auth.Token, "[token]")
		}
		return nil, fmt.Errorf("connect to NATS at %s: %s", RedactURLs(urls, urls), msg)
	}
	return nc, nil
}
