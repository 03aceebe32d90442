//go:build !race

package spotbench

// raceEnabled: see race_on_test.go.
const raceEnabled = false
