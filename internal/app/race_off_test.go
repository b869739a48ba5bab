//go:build !race

package app

// raceEnabled reports a test binary built with the race detector.
const raceEnabled = false
