//go:build race

package spotbench

// raceEnabled: the race detector makes the trace replays about ten times
// slower; they are skipped under it (TestRun covers the same code on small
// traces).
const raceEnabled = true
