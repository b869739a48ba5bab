package eventstore

import "strings"

// RedactURLs returns msg with each server URL of the comma-separated list
// urls, where it appears, replaced by the same URL with REDACTED in place of
// its user information (a user and password, or a token).
func RedactURLs(msg, urls string) string {
	if urls == "" {
		return msg
	}
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSpace(u)
		at := strings.LastIndex(u, "@")
		if at < 0 {
			continue
		}
		start := 0
		if i := strings.Index(u, "://"); i >= 0 && i < at {
			start = i + 3
		}
		msg = strings.ReplaceAll(msg, u, u[:start]+"REDACTED"+u[at:])
	}
	return msg
}
