//go:build race

package gateway

// raceEnabled: the race detector's sync.Pool drops items at random, so
// allocation counts are not the program's.
const raceEnabled = true
