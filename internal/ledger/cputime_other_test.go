//go:build !unix

package ledger_test

import "time"

// cpuTime is not measured here: the CPU figures read zero.
func cpuTime() time.Duration { return 0 }
