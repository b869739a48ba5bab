//go:build race

package contract

// raceEnabled reports a binary built with the race detector.
const raceEnabled = true
