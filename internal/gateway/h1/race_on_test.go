//go:build race

package h1

// raceEnabled: the race detector's sync.Pool drops items at random, so
// allocation counts are not the program's.
const raceEnabled = true
