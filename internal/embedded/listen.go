package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The files of the data dir in which a server started with Advertise says
// where it listens for NATS clients and with which token, mode 0600, for the
// commands that run beside it (crosscheck events). They are written at
// start and removed at Stop.
const (
	URLFile   = "nats-url"
	TokenFile = "nats-token"
)

// ErrNotAdvertised is in the chain of Advertised's error when no running
// server of the data dir listens for NATS clients.
var ErrNotAdvertised = errors.New("no running server of the data dir listens for NATS clients")

// Advertised returns the URL and token of the server that holds dir and
// listens for NATS clients. The error wraps ErrNotAdvertised when there is
// none: no server holds dir (files a killed one left are not taken), or the
// one that does listens on no port (then it wraps ErrLocked too, naming the
// holder).
func Advertised(dir string) (url, token string, err error) {
	if _, err := os.Stat(dir); err != nil {
		return "", "", fmt.Errorf("%w: %w", ErrNotAdvertised, err)
	}
	lock, lerr := Lock(dir)
	if lerr == nil {
		lock.Unlock()
		return "", "", fmt.Errorf("%w: no server holds %s", ErrNotAdvertised, dir)
	}
	if !errors.Is(lerr, ErrLocked) {
		return "", "", lerr
	}
	u, uerr := os.ReadFile(filepath.Join(dir, URLFile))
	t, terr := os.ReadFile(filepath.Join(dir, TokenFile))
	if uerr != nil || terr != nil || strings.TrimSpace(string(u)) == "" {
		return "", "", fmt.Errorf("%w (%w)", ErrNotAdvertised, lerr)
	}
	return strings.TrimSpace(string(u)), strings.TrimSpace(string(t)), nil
}

// advertise writes the server's client URL and token into the data dir.
func (s *Server) advertise(dir string) error {
	url := s.ClientURL()
	if err := writeSynced(filepath.Join(dir, TokenFile), []byte(s.token+"\n")); err != nil {
		return err
	}
	return writeSynced(filepath.Join(dir, URLFile), []byte(url+"\n"))
}

// unadvertise removes what advertise wrote.
func (s *Server) unadvertise() {
	if s.advertised != "" {
		_ = os.Remove(filepath.Join(s.advertised, URLFile))
		_ = os.Remove(filepath.Join(s.advertised, TokenFile))
	}
}
